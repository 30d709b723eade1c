"""Hindsight relabelling in the sampler (`algo.her`): the future goal comes from the same actor's
same episode, at or after the row; the reward is recomputed from the new goal; a share of rows."""

import numpy as np
import pytest

from robo_async.buffer.her import HerStrategy, Relabel, relabel
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.buffer.sampler import Sampler
from robo_async.transport.wire import TransitionBatch


class GoalEpisodes:
    """Rows whose achieved goal names them: (actor, episode, tick); the desired goal is (actor, episode, -1)."""

    def __init__(self) -> None:
        self.seq: dict[int, int] = {}

    def batch(self, actor: int, episode: int, t0: int, n: int, end: str | None = None) -> TransitionBatch:
        t = np.arange(t0, t0 + n)
        ident = np.stack([np.full(n, actor), np.full(n, episode), t], 1).astype(np.float32)
        nxt = ident.copy()
        nxt[:, 2] += 1
        desired = ident.copy()
        desired[:, 2] = -1
        term, trunc = np.zeros(n, bool), np.zeros(n, bool)
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
                "obs/achieved_goal": ident,
                "obs/desired_goal": desired,
                "next_obs/state": nxt,
                "next_obs/achieved_goal": nxt,
                "next_obs/desired_goal": desired.copy(),
                "action": np.zeros((n, 2), np.float32),
                "reward": np.full(n, -1.0, np.float32),
                "terminated": term,
                "truncated": trunc,
                "policy_version": np.zeros(n, np.int64),
                "success": np.zeros(n, bool),
            },
        )


# the episodes' last ticks, (actor, episode) -> last tick cached (running: the newest row)
LAST = {(0, 0): 8, (1, 0): 8, (0, 1): 1, (1, 1): 9, (0, 2): 8}


@pytest.fixture
def store(tmp_path):
    s = PersistentReplayStore(tmp_path / "replay", StoreConfig(commit_ms=5)).open()
    eps = GoalEpisodes()
    # two actors' interleaved batches: episodes ending by termination and truncation, one still running
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
        s.insert(b)
    assert s.flush()
    yield s
    s.close()


@pytest.mark.parametrize("final", [False, True])
def test_the_future_goal_is_of_the_same_episode_at_or_after_the_row(store, final):
    rng = np.random.default_rng(0)
    b = store.sample(2000, rng, goal_at="next_obs/achieved_goal", final=final)
    row, goal = b["obs/achieved_goal"], b["her/goal"]
    np.testing.assert_array_equal(goal[:, :2], row[:, :2])  # same actor, same episode
    ahead = goal[:, 2] - row[:, 2]
    assert (ahead >= 1).all()  # the row's own next achieved goal at the nearest
    last = np.array([LAST[(int(a), int(e))] + 1 for a, e in row[:, :2]])
    assert (goal[:, 2] <= last).all()  # never past the episode's end
    if final:
        np.testing.assert_array_equal(goal[:, 2], last)
    else:  # uniform over the rest of the episode: from the row's own next to the end
        first_row = row[:, 2] == 0
        spread = np.unique(goal[first_row & (row[:, 1] == 2) & (row[:, 0] == 0), 2])
        assert len(spread) == 9, spread  # every tick of actor 0's 9-row episode 2 is drawn


def test_relabel_rewrites_a_share_of_goals_and_recomputes_the_reward():
    rng = np.random.default_rng(1)
    n = 4000
    achieved_next = rng.normal(size=(n, 3)).astype(np.float32)
    batch = {
        "obs/desired_goal": np.full((n, 3), 9.0, np.float32),
        "next_obs/desired_goal": np.full((n, 3), 9.0, np.float32),
        "next_obs/achieved_goal": achieved_next,
        "reward": np.full(n, -1.0, np.float32),
        "success": np.zeros(n, bool),
    }
    # half the new goals are the row's own next achieved goal (reached), half far away (missed)
    goals = achieved_next.copy()
    goals[n // 2 :] += 1.0
    spec = Relabel(HerStrategy.future, threshold=0.05, ratio=0.8)
    count = relabel(batch, goals, rng, spec)
    changed = batch["obs/desired_goal"][:, 0] != 9.0
    assert count == changed.sum() and 0.75 < count / n < 0.85
    np.testing.assert_array_equal(batch["obs/desired_goal"], batch["next_obs/desired_goal"])
    np.testing.assert_array_equal(batch["obs/desired_goal"][changed], goals[changed])
    reached = changed & (np.arange(n) < n // 2)
    assert (batch["reward"][reached] == 0).all() and batch["success"][reached].all()
    assert (batch["reward"][~reached] == -1).all() and not batch["success"][~reached].any()


def test_the_sampler_relabels_and_counts(store):
    sampler = Sampler(store, 512, {"online": 1.0}, seed=0, her=Relabel(HerStrategy.future, threshold=0.01))
    b = sampler.sample_now()
    assert "her/goal" not in b
    relabelled = b["obs/desired_goal"][:, 2] != -1
    assert sampler.relabelled == relabelled.sum() > 300
    # a relabelled row reaches its goal exactly when the goal is its own next achieved goal
    own = (b["obs/desired_goal"] == b["next_obs/achieved_goal"]).all(1)
    assert own[relabelled].any() and (~own[relabelled]).any()
    np.testing.assert_array_equal(b["reward"][relabelled], np.where(own[relabelled], 0.0, -1.0))
    assert (b["reward"][~relabelled] == -1).all()


def test_her_is_refused_for_windows_and_without_episode_links(store):
    with pytest.raises(ValueError, match="single transitions"):
        Sampler(store, 8, {"online": 1.0}, window=4, her=Relabel(HerStrategy.final, threshold=0.05))
    from robo_async.buffer.store import InMemoryReplayStore

    with pytest.raises(Exception, match="episode links"):
        InMemoryReplayStore(10).sample(1, np.random.default_rng(0), goal_at="next_obs/achieved_goal")
    for bad in (dict(ratio=0.0), dict(threshold=0.0), dict(threshold=float("nan"))):
        with pytest.raises(ValueError, match="algo.her_"):
            Relabel(HerStrategy.future, **{"threshold": 0.05, **bad})
