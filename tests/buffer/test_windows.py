"""Windows of consecutive transitions from the store (chunked critics), and the staleness bound."""

import time

import numpy as np

from robo_async.buffer.cache import window_targets
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.buffer.sampler import Sampler
from robo_async.transport.wire import TransitionBatch


class Episodes:
    """Rows of several actors' episodes; every row names itself: state = (actor, episode, tick)."""

    def __init__(self) -> None:
        self.seq: dict[int, int] = {}

    def batch(self, actor: int, episode: int, t0: int, n: int, end: str | None = None, version: int = 0):
        t = np.arange(t0, t0 + n)
        ident = np.stack([np.full(n, actor), np.full(n, episode), t], 1).astype(np.float32)
        nxt = ident.copy()
        nxt[:, 2] += 1
        term = np.zeros(n, bool)
        trunc = np.zeros(n, bool)
        if end == "terminated":
            term[-1] = True
        elif end == "truncated":
            trunc[-1] = True
        seq = self.seq.get(actor, 0)
        self.seq[actor] = seq + n
        return TransitionBatch(
            actor,
            seq,
            {
                "obs/state": ident,
                "next_obs/state": nxt,
                "action": ident.copy(),
                "reward": (t + 1).astype(np.float32),
                "terminated": term,
                "truncated": trunc,
                "policy_version": np.full(n, version, np.int64),
                "success": term.copy(),
            },
        )


def opened(path, **kw):
    return PersistentReplayStore(path, StoreConfig(commit_ms=5, **kw)).open()


def fill(store, eps: Episodes) -> None:
    # two actors, interleaved batches, episodes ending by termination, by truncation, and one
    # episode of actor 1 still running at the end
    for b in (
        eps.batch(0, 0, 0, 6),
        eps.batch(1, 0, 0, 5),
        eps.batch(0, 0, 6, 3, "terminated"),
        eps.batch(1, 0, 5, 4, "truncated"),
        eps.batch(0, 1, 0, 2, "terminated"),
        eps.batch(1, 1, 0, 7),
        eps.batch(0, 2, 0, 9, "truncated"),
        eps.batch(1, 1, 7, 3),
    ):
        store.insert(b)
    assert store.flush()


def check_windows(w: dict, horizon: int, running: tuple[int, int] = (1, 1)) -> None:
    acts = w["actions"]
    for i in range(len(acts)):
        steps = int(w["steps"][i])
        a, e, t0 = acts[i, 0]
        np.testing.assert_array_equal(w["obs/state"][i], acts[i, 0])
        for k in range(horizon):
            if k < steps:  # inside the episode: the same actor and episode, consecutive ticks
                np.testing.assert_array_equal(acts[i, k], [a, e, t0 + k])
                assert w["mask"][i, k] == 1
            else:  # past its end: the last row repeated, masked
                np.testing.assert_array_equal(acts[i, k], acts[i, steps - 1])
                assert w["mask"][i, k] == 0 and w["rewards"][i, k] == 0
        last = acts[i, steps - 1]
        np.testing.assert_array_equal(w["next_obs/state"][i], last + [0, 0, 1])
        if steps < horizon:
            assert w["terminated"][i] or w["truncated"][i]
        if (a, e) == running:  # an episode still running: only complete windows
            assert steps == horizon


def test_windows_never_cross_actors_or_episodes(tmp_path):
    s = opened(tmp_path / "r")
    fill(s, Episodes())
    w = s.sample_windows(4000, 4, np.random.default_rng(0))
    check_windows(w, 4)
    starts = {tuple(r) for r in w["obs/state"].astype(int).tolist()}
    # every row can start a window except the last 3 of the episode still running (1, 1, 7..9)
    assert (1, 1, 6) in starts and not starts & {(1, 1, 7), (1, 1, 8), (1, 1, 9)}
    assert (0, 0, 8) in starts and (1, 0, 8) in starts  # a window that is one step long
    ends = w["steps"] < 4
    assert w["terminated"][ends].any() and w["truncated"][ends].any()
    # the termination of actor 0's first episode is seen as such (no bootstrap), the truncation is not
    t = w["obs/state"][:, 2]
    first_term = (w["obs/state"][:, 0] == 0) & (w["obs/state"][:, 1] == 0) & (t >= 6)
    assert w["terminated"][first_term].all() and not w["truncated"][first_term].any()
    s.close()


def test_windows_from_the_reservoir_after_a_restart(tmp_path):
    s = opened(tmp_path / "r")
    fill(s, Episodes())
    s.close()
    s = opened(tmp_path / "r", cache_transitions=200)  # everything is older than the (empty) ring
    deadline = time.monotonic() + 30
    while s.caches["online"].reservoir_filled < len(s) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.caches["online"].recent_filled == 0
    w = s.sample_windows(2000, 3, np.random.default_rng(1))
    check_windows(w, 3)
    assert len({tuple(r) for r in w["obs/state"].astype(int).tolist()}) > 30
    s.close()


def test_a_window_skips_rows_overwritten_in_the_ring(tmp_path):
    s = opened(tmp_path / "r", cache_transitions=16)  # a ring of 8: most of the history is gone
    eps = Episodes()
    for k in range(6):
        s.insert(eps.batch(0, 0, 3 * k, 3))
        s.insert(eps.batch(1, 0, 3 * k, 3))
    s.flush()
    w = s.sample_windows(500, 3, np.random.default_rng(2), "online")
    check_windows(w, 3, running=(-1, -1))
    s.close()


def test_h_step_target_matches_a_hand_computation():
    gamma = 0.9
    rewards = np.array([[1.0, 2.0, 3.0], [5.0, 7.0, 0.0], [4.0, 0.0, 0.0]], np.float32)
    mask = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0]], np.float32)
    steps = np.array([3, 2, 1])
    terminated = np.array([False, True, False])
    ret, boot = window_targets(rewards, mask, steps, terminated, gamma)
    np.testing.assert_allclose(ret, [1 + 0.9 * 2 + 0.81 * 3, 5 + 0.9 * 7, 4.0], rtol=1e-6)
    np.testing.assert_allclose(boot, [0.9**3, 0.0, 0.9], rtol=1e-6)


def test_a_store_window_gives_the_hand_computed_target(tmp_path):
    s = opened(tmp_path / "r")
    fill(s, Episodes())
    w = s.sample_windows(2000, 4, np.random.default_rng(3))
    ret, boot = window_targets(w["rewards"], w["mask"], w["steps"], w["terminated"], 0.5)
    for i in range(len(ret)):
        t0, steps = int(w["obs/state"][i, 2]), int(w["steps"][i])
        want = sum(0.5**k * (t0 + k + 1) for k in range(steps))  # reward of tick t is t + 1
        assert abs(ret[i] - want) < 1e-4
        assert boot[i] == (0.0 if w["terminated"][i] else 0.5**steps)
    s.close()


def test_staleness_bound_drops_exactly_the_old_versions(tmp_path):
    s = opened(tmp_path / "r")
    eps = Episodes()
    for v in range(10):
        s.insert(eps.batch(0, v, 0, 20, "truncated", version=v))
        s.insert(eps.batch(1, v, 0, 20, "truncated", version=v), "demos")
    s.flush()
    sampler = Sampler(s, 256, {"online": 0.5, "demos": 0.5}, seed=0, max_lag=3)
    sampler.version_floor = 6  # learner at version 9, K = 3
    seen = np.concatenate([sampler.sample_now()["policy_version"] for _ in range(20)])
    b = sampler.sample_now()
    assert set(b["policy_version"][:128].tolist()) <= {6, 7, 8, 9}  # online share comes first
    assert set(b["policy_version"][128:].tolist()) >= {0, 1, 2}  # demos are never dropped for age
    assert sampler.dropped_stale > 0 and len(b["policy_version"]) == 256
    assert {6, 7, 8, 9} <= set(seen.tolist())
    windows = Sampler(s, 64, {"online": 1.0}, seed=1, window=5, max_lag=3)
    windows.version_floor = 6
    wb = windows.sample_now()
    assert set(wb["policy_version"].tolist()) == {6, 7, 8, 9} and wb["actions"].shape == (64, 5, 3)
    s.close()


def test_windows_stay_whole_while_the_reservoir_is_refreshed(tmp_path):
    s = opened(tmp_path / "r")
    eps = Episodes()
    for e in range(12):  # two actors, interleaved, 12 episodes each
        for a in (0, 1):
            s.insert(eps.batch(a, e, 0, 7))
        for a in (0, 1):
            s.insert(eps.batch(a, e, 7, 6, "terminated" if e % 2 else "truncated"))
    s.close()
    # a small reservoir refreshed fast by short runs over random slots: links between rows of
    # different runs go stale all the time
    s = opened(tmp_path / "r", cache_transitions=40, page_run=7, refresh_per_s=20_000)
    rng = np.random.default_rng(4)
    t0 = time.monotonic()
    n = 0
    # at least 2 s of sampling while the refresh runs, and at least 1,000 windows checked, however slow the machine
    while (time.monotonic() < t0 + 2.0 or n <= 1000) and time.monotonic() < t0 + 120:
        w = s.sample_windows(64, 4, rng)
        if w is not None:
            check_windows(w, 4, running=(-1, -1))
            n += len(w["steps"])
    assert n > 1000
    s.close()


def test_windows_know_whether_their_episode_succeeded(tmp_path):
    s = opened(tmp_path / "r")
    fill(s, Episodes())  # success == terminated in these episodes
    want = {(0, 0): 1, (1, 0): 0, (0, 1): 1, (1, 1): -1, (0, 2): 0}  # (1, 1) is still running
    w = s.sample_windows(3000, 3, np.random.default_rng(5))
    for (a, e), outcome in want.items():
        rows = (w["obs/state"][:, 0] == a) & (w["obs/state"][:, 1] == e)
        assert rows.any() and set(w["episode_success"][rows].tolist()) == {outcome}, (a, e)
    s.close()
    s = opened(tmp_path / "r", cache_transitions=200)  # after a restart: paged in, outcomes rebuilt
    deadline = time.monotonic() + 30
    while s.caches["online"].reservoir_filled < len(s) and time.monotonic() < deadline:
        time.sleep(0.01)
    w = s.sample_windows(3000, 3, np.random.default_rng(6))
    for (a, e), outcome in want.items():
        rows = (w["obs/state"][:, 0] == a) & (w["obs/state"][:, 1] == e)
        assert set(w["episode_success"][rows].tolist()) <= {outcome, -1}, (a, e)
    assert (w["episode_success"] == 1).any() and (w["episode_success"] == 0).any()
    sampler = Sampler(s, 128, {"online": 0.5, "demos": 0.5}, window=3, successful_only=True)
    b = sampler.sample_now()
    online = b["table"] == 0
    assert online.any() and (b["episode_success"][online] == 1).all() and sampler.rejected_outcome > 0
    s.close()


def check_lookback(w: dict, lookback: int) -> None:
    """Each window's lagged observation is `lag` ticks before it in the same actor's episode, and
    `lag_actions` are the actions of exactly the ticks in between, in order."""
    lags = w["lag"]
    assert ((lags >= 0) & (lags <= lookback)).all()
    for i in range(len(lags)):
        a, e, t0 = w["obs/state"][i]
        d = int(lags[i])
        np.testing.assert_array_equal(w["lag_obs/state"][i], [a, e, t0 - d])
        want = np.array([[a, e, t0 - d + j] for j in range(d)], np.float32).reshape(d, 3)
        np.testing.assert_array_equal(w["lag_actions"][i, :d], want)
        assert not w["lag_actions"][i, d:].any()


def test_lookback_stays_inside_the_episode_and_actor(tmp_path):
    s = opened(tmp_path / "r")
    fill(s, Episodes())
    w = s.sample_windows(4000, 3, np.random.default_rng(6), lookback=4)
    check_windows(w, 3)
    check_lookback(w, 4)
    t0, lag = w["obs/state"][:, 2].astype(int), w["lag"]
    assert (lag <= t0).all()  # never before the episode's first tick (nor into the previous episode)
    assert set(lag[t0 >= 4].tolist()) == {0, 1, 2, 3, 4}  # every lag is drawn where the episode has it
    # rows across a batch boundary of one actor are linked: actor 0's episode 0 continues at tick 6
    cross = (w["obs/state"][:, 0] == 0) & (w["obs/state"][:, 1] == 0) & (t0 == 7) & (lag == 4)
    assert cross.any()
    s.close()
    # after a restart the reservoir links runs it paged in together; nothing crosses what it lacks
    s = opened(tmp_path / "r", cache_transitions=200)
    deadline = time.monotonic() + 30
    while s.caches["online"].reservoir_filled < len(s) and time.monotonic() < deadline:
        time.sleep(0.01)
    w = s.sample_windows(2000, 3, np.random.default_rng(7), lookback=4)
    check_windows(w, 3)
    check_lookback(w, 4)
    assert (w["lag"] <= w["obs/state"][:, 2]).all()
    s.close()


def test_lookback_skips_rows_overwritten_in_the_ring(tmp_path):
    s = opened(tmp_path / "r", cache_transitions=16)  # a ring of 8
    eps = Episodes()
    for k in range(6):
        s.insert(eps.batch(0, 0, 3 * k, 3))
        s.insert(eps.batch(1, 0, 3 * k, 3))
    s.flush()
    w = s.sample_windows(500, 2, np.random.default_rng(8), lookback=6)
    check_windows(w, 2, running=(-1, -1))
    check_lookback(w, 6)
    assert w["lag"].max() >= 1
    s.close()


def test_lookback_never_takes_another_actors_row_from_a_reused_slot(tmp_path):
    s = opened(tmp_path / "r", cache_transitions=16)  # a ring of 8
    eps = Episodes()
    s.insert(eps.batch(0, 0, 0, 4))  # slots 0-3
    s.insert(eps.batch(0, 0, 4, 4))  # slots 4-7; actor 0's newest row (seq 7) sits in slot 7
    s.insert(eps.batch(1, 0, 0, 8))  # slots 0-7: slot 7 now holds actor 1's seq 7
    s.insert(eps.batch(0, 0, 8, 2))  # slots 0-1, seqs 8-9: seq 8's predecessor slot holds seq 7 of actor 1
    s.flush()
    w = s.sample_windows(500, 2, np.random.default_rng(9), lookback=3)
    check_lookback(w, 3)
    assert ((w["obs/state"][:, 0] == 0) & (w["obs/state"][:, 2] == 8)).any()
    s.close()


def _rows(n: int, end: str | None = None, won: bool = False) -> dict[str, np.ndarray]:
    """n rows of an episode (the last one ending it as `end`, a success if `won`)."""
    last = np.zeros(n, bool)
    last[-1] = True
    return {
        "obs/state": np.zeros((n, 2), np.float32),
        "terminated": last & (end == "terminated"),
        "truncated": last & (end == "truncated"),
        "success": last & won,
    }


def test_an_episode_longer_than_the_ring_marks_only_its_rows_still_held():
    from robo_async.buffer.cache import TableCache
    from robo_async.buffer.codec import Schema

    cache = TableCache(Schema.of(_rows(1)), capacity=40)  # a ring of 20 rows
    ring = cache._rec
    seq = {0: 0, 1: 0}

    def add(actor: int, n: int, end: str | None = None, won: bool = False) -> None:
        cache.append(_rows(n, end, won), 0, actor, seq[actor])
        seq[actor] += n

    add(1, 5, "terminated", won=False)  # actor 1: a finished, failed episode
    for _ in range(30):  # actor 0: an episode of 300 rows, 15 ring-fulls, still running
        add(0, 10)
        assert cache._open[0][3] <= 20 + 10  # the running episode's slots are bounded by the ring
    add(1, 4)  # actor 1 starts another episode in the ring
    add(0, 6, "terminated", won=True)
    mine = ring.actor == 0
    assert mine.sum() == 16 and (ring.outcome[mine] == 1).all()  # every row of it still held: a success
    theirs = ring.actor == 1
    assert theirs.sum() == 4 and (ring.outcome[theirs] == -1).all()  # actor 1's running episode: unknown
