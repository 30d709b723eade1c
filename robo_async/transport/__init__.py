"""ZMQ transport: message schema (`wire`) and channels between actors and the learner."""

from robo_async.transport.channels import (
    PortInUse,
    TransitionReceiver,
    TransitionSender,
    WeightClient,
    WeightPublisher,
)
from robo_async.transport.wire import (
    EpisodeStats,
    Heartbeat,
    LearnerStatus,
    TransitionBatch,
    Weights,
    WireError,
    decode,
    encode,
)

__all__ = [
    "EpisodeStats", "Heartbeat", "LearnerStatus", "PortInUse", "TransitionBatch",
    "TransitionReceiver", "TransitionSender", "WeightClient", "WeightPublisher", "Weights",
    "WireError", "decode", "encode",
]
