"""`transport:` config section: where the learner binds and how its links are secured."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TransportOptions:
    """`transport`: the learner's ZMQ endpoints, CURVE keys and message limits."""

    host: str = "127.0.0.1"  # the learner binds here (0.0.0.0 for actors on other machines: needs keys)
    data_port: int = 0  # 0: any free port
    weights_port: int = 0  # 0: any free port
    keys: str | None = None  # CURVE keys dir from `robo-async keys` (encrypted links; only listed actor keys connect)
    # auto: on with keys; a host beyond loopback without keys is refused | on | off (opt out, unsafe)
    curve: str = "auto"
    max_message_mb: float = 64.0  # the learner refuses larger frames from actors (ZMQ disconnects the sender)
    queue_mb: float = 64.0  # ZMQ queues per peer sized in bytes (high-water marks from the expected message size)
    # the data and weights addresses actors dial, when they reach the learner through a NAT, a tunnel (ssh -L) or a
    # proxy, e.g. [tcp://gateway:7001, tcp://gateway:7002]; default: the addresses the learner binds
    advertise: tuple[str, ...] | None = None
