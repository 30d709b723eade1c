"""Diffusion steering (`algo=dsrl`): SAC in the noise space of a frozen flow policy."""

from robo_async.learner.algorithms.dsrl.config import DSRLConfig
from robo_async.learner.algorithms.dsrl.learning import DSRL

__all__ = ["DSRL", "DSRLConfig"]
