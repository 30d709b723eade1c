"""ZMQ transport: the messages (`messages`, `stats`), their encoding and checks (`wire`, `checks`),
and the channels between actors, the learner and the policy server (`channels`, `publisher`, `weights`,
`curve`)."""

from robo_async.transport.channels import PortInUse, TransitionReceiver, TransitionSender, WeightClient
from robo_async.transport.publisher import WeightPublisher
from robo_async.transport.wire import (
    ActorStats,
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
    "ActorStats",
    "EpisodeStats",
    "Heartbeat",
    "LearnerStatus",
    "PortInUse",
    "TransitionBatch",
    "TransitionReceiver",
    "TransitionSender",
    "WeightClient",
    "WeightPublisher",
    "Weights",
    "WireError",
    "decode",
    "encode",
]
