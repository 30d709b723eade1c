import numpy as np
import pytest

from robo_async.buffer import InMemoryReplayStore, ReplayError, SampleToInsertRatio
from robo_async.transport.wire import TransitionBatch


def batch(actor, seq, n, dim=3):
    return TransitionBatch(
        actor,
        seq,
        {
            "obs/state": np.arange(seq, seq + n, dtype=np.float32)[:, None].repeat(dim, 1),
            "action": np.zeros((n, 2), np.float32),
            "reward": np.arange(seq, seq + n, dtype=np.float32),
            "terminated": np.zeros(n, bool),
            "truncated": np.zeros(n, bool),
            "policy_version": np.zeros(n, np.int64),
        },
    )


def test_insert_sample_and_duplicates_dropped():
    s = InMemoryReplayStore(100)
    assert s.insert(batch(0, 0, 10)) == 10
    assert s.insert(batch(0, 0, 10)) == 0  # a resend after reconnect
    assert s.insert(batch(0, 5, 10)) == 5  # partial overlap keeps only the new tail
    assert len(s) == 15 and s.ack(0) == 15
    assert s.insert(batch(1, 0, 4)) == 4  # another actor has its own numbering
    out = s.sample(64, np.random.default_rng(0))
    assert out["obs/state"].shape == (64, 3)
    assert set(np.unique(out["reward"])) <= set(range(15))


def test_ring_buffer_overwrites_oldest():
    s = InMemoryReplayStore(8)
    s.insert(batch(0, 0, 12))
    assert len(s) == 8
    assert set(s.sample(200, np.random.default_rng(0))["reward"].tolist()) == set(range(4, 12))


def test_shape_mismatch_is_named_and_nothing_lost():
    s = InMemoryReplayStore(10)
    s.insert(batch(0, 0, 3))
    with pytest.raises(ReplayError, match="'obs/state' is float32\\(4,\\), store holds float32\\(3,\\)"):
        s.insert(batch(0, 3, 2, dim=4))
    assert len(s) == 3 and s.ack(0) == 3


def test_empty_sample_raises():
    with pytest.raises(ReplayError, match="empty"):
        InMemoryReplayStore(4).sample(1, np.random.default_rng(0))


def test_rate_limiter_ties_updates_to_inserts():
    lim = SampleToInsertRatio(updates_per_insert=2.0, min_size=10, slack=5)
    lim.inserted = 9
    assert not lim.can_update()
    lim.inserted = 12
    n = 0
    while lim.can_update():
        lim.updates += 1
        n += 1
    assert n == 5  # (12 - 10) * 2 + 1
    assert lim.allowed_inserts() == 10 + 5 // 2 + 5
    state = lim.state_dict()
    other = SampleToInsertRatio(2.0, 10)
    other.load_state_dict(state)
    assert other.state_dict() == state


def test_a_dead_prefetch_thread_is_reported_by_get(tmp_path):
    import time as _time

    import pytest as _pytest

    from robo_async.buffer.sampler import Sampler

    class Broken:
        def can_sample(self, table):
            return True

        def sample(self, n, rng, table):
            raise OSError("disk gone")

    sampler = Sampler(Broken(), 8, {"online": 1.0}).start()
    deadline = _time.monotonic() + 10
    while sampler.error is None and _time.monotonic() < deadline:
        _time.sleep(0.01)
    with _pytest.raises(RuntimeError, match="prefetch thread died: OSError: disk gone"):
        sampler.get()
    sampler.close()


def test_the_sampler_works_over_any_replay_store():
    from robo_async.buffer.sampler import Sampler

    s = InMemoryReplayStore(100)
    sampler = Sampler(s, 16, {"online": 1.0, "demos": 1.0}, seed=0)  # the in-memory store has no demos
    assert sampler.get() is None and not s.can_sample()  # nothing to sample yet: no batch, no error
    s.insert(batch(0, 0, 10))
    assert s.can_sample() and not s.can_sample("demos")
    out = sampler.get()
    assert out is not None and out["obs/state"].shape == (16, 3) and set(out["table"]) == {0}  # all online
    assert s.sample_windows(4, 3, np.random.default_rng(0)) is None  # no episode order kept: no windows
    sampler.close()
