"""Replay storage: the `ReplayStore` interface, stores, and the rate limiter."""

from robo_async.buffer.store import InMemoryReplayStore, ReplayError, ReplayStore, SampleToInsertRatio

__all__ = ["InMemoryReplayStore", "ReplayError", "ReplayStore", "SampleToInsertRatio"]
