"""What an `Uplink` is given: `UplinkConfig` (the journal, the RAM budget, resends, frame encoding,
queue sizes), made from the `actor:` options for training actors or filled directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from robo_async.actor.options import ActorOptions
from robo_async.buffer.layout import StoreConfig
from robo_async.transport.options import TransportOptions


@dataclass(frozen=True)
class UplinkConfig:
    """Acknowledged delivery: the journal, the RAM budget, resends, frame encoding, queue sizes. A
    field named as an `actor.*` or `transport.*` key takes its default from `ActorOptions` or
    `TransportOptions` (the one definition); training actors get it from `from_options`."""

    journal_dir: str | None = None  # actor-local store of unacked batches; None: RAM only
    journal: bool = ActorOptions.journal  # journal every batch (else only spill beyond max_ram_mb)
    max_ram_mb: float = ActorOptions.max_ram_mb  # unacked batches held in RAM before the oldest are spilled
    journal_commit_ms: float = 100.0  # journal group-commit interval
    resend_s: float = ActorOptions.resend_s  # resend unacked batches when acks stall this long
    max_other: int = 1000  # episode stats / heartbeats waiting to be sent (oldest dropped)
    # The thread wakes this often (or when put() leaves it work). Every wake takes the GIL from
    # the control loop; keep it under journal_commit_ms so the journal is written on time.
    idle_s: float = 0.05
    # Camera frames are encoded here, on the uplink thread (never in put()), so the learner only
    # stores bytes and the wire and journal carry ~5x less: "qoi" or "png" (lossless), "jpeg", or
    # None to send raw pixels (the store's `buffer.image_codec` and `jpeg_quality`).
    image_codec: str | None = StoreConfig.image_codec
    jpeg_quality: int = StoreConfig.jpeg_quality
    # batches queued in ZMQ, in bytes (the high-water mark is sized from it) ...
    queue_mb: float = TransportOptions.queue_mb
    message_bytes: int = 65536  # ... and the expected size of one batch message

    @classmethod
    def from_options(
        cls,
        options: ActorOptions,
        *,
        journal_dir: str | None,
        image_codec: str | None,
        jpeg_quality: int,
        queue_mb: float,
        message_bytes: int,
    ) -> UplinkConfig:
        """A training actor's delivery: `actor.journal`, `max_ram_mb` and `resend_s` as they are;
        the journal's place, the store's frame encoding (`buffer.image_codec`, `jpeg_quality`) and
        the queue sizes (`transport.queue_mb`, one batch's size) from the plan."""
        return cls(
            journal_dir=journal_dir,
            journal=options.journal,
            max_ram_mb=options.max_ram_mb,
            resend_s=options.resend_s,
            image_codec=image_codec,
            jpeg_quality=jpeg_quality,
            queue_mb=queue_mb,
            message_bytes=message_bytes,
        )
