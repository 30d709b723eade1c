"""The conformance suite every `ReplayStore` passes (the in-memory one and the persistent one).

    check_store(lambda: PersistentReplayStore(tmp).open())   # raises ConformanceError naming what is wrong

Checks, after `flush()`: inserted transitions are acked per actor and counted; a resent or
overlapping batch adds only what is new; a batch that skips ahead of an actor's high-water mark is
not taken (the actor resends in order); a batch of the wrong shape raises ReplayError and stores
nothing; compact batches (`final_obs/<key>`, as the Adder sends) become full rows; sampled rows
keep each transition's fields together (obs, action, reward, next_obs of one row).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from robo_async.buffer.store import ReplayError, ReplayStore
from robo_async.transport.wire import FINAL_OBS, TransitionBatch


class ConformanceError(AssertionError):
    """A `ReplayStore` broke the interface's contract (what, in the message)."""

    pass


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise ConformanceError(what)


def rows(actor: int, seq: int, n: int, compact: bool = False, action_dim: int = 6) -> TransitionBatch:
    """n consecutive transitions whose every field encodes its seq (obs = seq, next_obs = seq + 1)."""
    s = np.arange(seq, seq + n, dtype=np.float32)
    arrays = {
        "obs/state": np.repeat(s[:, None], 6, 1),
        "action": np.repeat(s[:, None], action_dim, 1),
        "reward": s.copy(),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "policy_version": np.zeros(n, np.int64),
    }
    nxt = np.repeat((s + 1)[:, None], 6, 1)
    if compact:
        arrays[f"{FINAL_OBS}state"] = nxt[-1:]
    else:
        arrays["next_obs/state"] = nxt
    return TransitionBatch(actor, seq, arrays)


def check_store(make: Callable[[], ReplayStore]) -> None:
    """Run the `ReplayStore` conformance suite on a fresh store from `make()`: new, resent,
    overlapping and gapped batches, acks and high-water marks, compact batches, sampling. Raises
    ConformanceError naming the first broken rule."""
    store = make()
    try:

        def put(batch: TransitionBatch) -> int:
            n = store.insert(batch)
            _check(store.flush(), "flush() did not finish")
            return n

        _check(put(rows(1, 0, 4)) == 4, "a new batch of 4 must add 4")
        _check(store.ack(1) == 4 and len(store) == 4, f"after 4 committed: ack {store.ack(1)}, len {len(store)}")
        _check(put(rows(1, 0, 4)) == 0 and len(store) == 4, "a resent batch must add nothing")
        _check(put(rows(1, 2, 4)) == 2 and store.ack(1) == 6, "an overlapping batch must add only what is new")
        _check(put(rows(1, 10, 2)) == 0 and store.ack(1) == 6, "a batch past a gap must not be taken")
        try:
            store.insert(rows(1, 6, 2, action_dim=5))
            raise ConformanceError("a batch of the wrong shape must raise ReplayError")
        except ReplayError:
            pass
        store.flush()
        _check(len(store) == 6 and store.ack(1) == 6, "a refused batch must store nothing")
        _check(put(rows(2, 0, 3, compact=True)) == 3, "a compact batch must add its rows")
        _check(store.high_water() == {1: 6, 2: 3}, f"high_water {store.high_water()} != {{1: 6, 2: 3}}")
        b = store.sample(64, np.random.default_rng(0))
        _check(
            b["obs/state"].shape == (64, 6) and b["next_obs/state"].shape == (64, 6),
            "sampled obs/next_obs must have the batch's leading dimension and the stored shapes",
        )
        s = b["obs/state"][:, 0]
        _check(
            bool(
                np.all(b["reward"] == s)
                and np.all(b["action"][:, 0] == s)
                and np.all(b["next_obs/state"][:, 0] == s + 1)
            ),
            "sampled rows must keep each transition's fields together (next_obs rebuilt for compact ones)",
        )
    finally:
        store.close()
