"""Q-chunking with flow Q-learning (`algo=qc`): a chunked critic and a one-step chunk actor."""

from robo_async.learner.algorithms.qc.config import QCConfig
from robo_async.learner.algorithms.qc.learning import QC

__all__ = ["QC", "QCConfig"]
