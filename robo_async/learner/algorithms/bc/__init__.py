"""Behaviour cloning from the store's demonstrations (`algo=bc`)."""

from robo_async.learner.algorithms.bc.config import BCConfig
from robo_async.learner.algorithms.bc.learning import BC

__all__ = ["BC", "BCConfig"]
