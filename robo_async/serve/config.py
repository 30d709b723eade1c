"""What one policy server is given (`ServeConfig`): where it listens, how it batches, which
learner's weights it follows; made from the `serve:` and `transport:` sections in `from_options`.
"""

from __future__ import annotations

from dataclasses import dataclass

from robo_async.serve.options import ServeOptions
from robo_async.transport.options import TransportOptions


@dataclass(frozen=True)
class ServeConfig:
    """How a `PolicyServer` listens, batches and follows the learner (`robo-async serve`'s
    `serve.*` and `transport.*` keys). A field named as a `serve.*` or `transport.*` key takes its
    default from `ServeOptions` or `TransportOptions` (the one definition); `from_options` makes it
    from them."""

    address: str = "tcp://127.0.0.1:5560"  # serve.port on transport.host
    weights_address: str | None = None  # the learner's weight publisher (serve.weights): new weights are hot-swapped
    keys_dir: str | None = None  # CURVE: the learner's pair serves, only listed actor keys connect
    key_id: int = ServeOptions.key_id  # with keys: the actor key the server subscribes to the learner's weights with
    max_batch: int = ServeOptions.max_batch  # requests per forward pass
    # after the first request, wait this long for others to batch with it
    batch_window_ms: float = ServeOptions.batch_window_ms
    # larger requests are refused by ZMQ (the sender is disconnected)
    max_message_mb: float = TransportOptions.max_message_mb
    policy_name: str = ""  # what hellos are checked against ("" accepts any)

    @classmethod
    def from_options(
        cls, options: ServeOptions, transport: TransportOptions, *, keys_dir: str | None, policy_name: str
    ) -> ServeConfig:
        """The server of `serve:` on `transport.host`, its CURVE keys (checked by the caller) and the
        policy it serves."""
        return cls(
            f"tcp://{transport.host}:{options.port}",
            weights_address=options.weights or None,
            keys_dir=keys_dir,
            key_id=options.key_id,
            max_batch=options.max_batch,
            batch_window_ms=options.batch_window_ms,
            max_message_mb=transport.max_message_mb,
            policy_name=policy_name,
        )
