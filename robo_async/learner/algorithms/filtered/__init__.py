"""Filtered flow fine-tuning (`algo=filtered`): BC on what worked, the simple baseline."""

from robo_async.learner.algorithms.filtered.config import FilteredConfig
from robo_async.learner.algorithms.filtered.learning import Filtered

__all__ = ["Filtered", "FilteredConfig"]
