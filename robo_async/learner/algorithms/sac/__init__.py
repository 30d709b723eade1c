"""Soft Actor-Critic (`algo=sac`)."""

from robo_async.learner.algorithms.sac.config import SACConfig
from robo_async.learner.algorithms.sac.learning import SAC

__all__ = ["SAC", "SACConfig"]
