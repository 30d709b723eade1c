"""Behaviour cloning (`algo=bc`) of every policy: on the learner from the store's demonstrations,
offline by `robo-async bc` (`offline.clone`) from recorded episodes, through the same `BC.update`."""

from robo_async.learner.algorithms.bc.config import BCConfig, BCOptions
from robo_async.learner.algorithms.bc.learning import BC

__all__ = ["BC", "BCConfig", "BCOptions"]
