"""`DemoWindows`: recorded demonstration episodes as the learner's `Sampler` would batch them, in
memory, for `robo-async bc` (behaviour cloning offline, through the same `Algorithm.update`).

    windows = DemoWindows(episodes, window=algo.window, lookback=algo.lookback, seed=0)
    algo.update(windows.sample(256))

The episodes go into a `TableCache` (the store's RAM cache) as one actor each, their last row
truncated, so a batch is exactly what `Sampler` gives the learner: rows (`window=1`) or windows
of `window` consecutive transitions with `lookback` (see `TableCache.sample_windows`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hal.spec import RobotSpec
from robo_async.buffer.cache import TableCache
from robo_async.buffer.codec import Schema


def episode_rows(ep: dict[str, np.ndarray], obs_keys: Sequence[str]) -> dict[str, np.ndarray]:
    """One episode (`obs/<key>` and `action` per tick) as store columns; observation keys it lacks
    (a multi-task set: `obs_keys` is the union) are zeros, as the policies read a missing feature."""
    n = len(ep["action"])
    rows = {
        "action": np.asarray(ep["action"], np.float32),
        "reward": np.zeros(n, np.float32),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "success": np.zeros(n, bool),
        "policy_version": np.zeros(n, np.int64),
    }
    rows["truncated"][-1] = True  # the recording ends here: no window runs into the next episode
    for k in obs_keys:
        rows[k] = np.asarray(ep[k]) if k in ep else None  # type: ignore[assignment]
    return rows


def check_demos(episodes: Sequence[dict[str, np.ndarray]], spec: RobotSpec, keys: Sequence[str]) -> None:
    """Refuse demonstrations that do not fit the task: each observation key the policy reads
    (`keys`: vector keys and camera names) must be there with the task's shape per tick, and the
    actions must have one value per joint. Raises ValueError naming the key and both shapes."""
    want: dict[str, tuple[int, ...]] = {"state": (spec.state_dim,), **{k: (n,) for k, n in spec.features}}
    want.update({c.name: (c.height, c.width, 3) for c in spec.cameras})
    for i, ep in enumerate(episodes):
        for k in keys:
            if f"obs/{k}" not in ep:
                have = sorted(x.removeprefix("obs/") for x in ep if x.startswith("obs/"))
                raise ValueError(f"the demonstrations have no '{k}' (episode {i} has {have})")
            got = tuple(np.asarray(ep[f"obs/{k}"]).shape[1:])
            if k in want and got != want[k]:
                what = "camera" if len(want[k]) == 3 else "observation"
                raise ValueError(
                    f"demonstrations' {k} is {'x'.join(map(str, got))} per tick, the task's {what} {k} "
                    f"is {'x'.join(map(str, want[k]))} (episode {i})"
                )
        got = tuple(np.asarray(ep["action"]).shape[1:])
        if got != (spec.action_dim,):
            raise ValueError(
                f"demonstrations' action has {got} per tick, the task's robot has {spec.action_dim} joints "
                f"(episode {i})"
            )


class DemoWindows:
    """Recorded episodes (`obs/<key>` and `action` per tick) held in RAM, sampled in the batches
    an `Algorithm` with this `window` and `lookback` expects (see the module's docstring).
    `episodes` and `transitions` count what it holds."""

    def __init__(
        self, episodes: Sequence[dict[str, np.ndarray]], *, window: int = 1, lookback: int = 0, seed: int = 0
    ) -> None:
        if not episodes:
            raise ValueError("no demonstration episodes to learn from")
        obs_keys = sorted({k for ep in episodes for k in ep if k.startswith("obs/")})
        like = {k: next(np.asarray(ep[k]) for ep in episodes if k in ep) for k in obs_keys}  # shape, dtype per key
        rows = [episode_rows(ep, obs_keys) for ep in episodes]
        for r in rows:
            for k in obs_keys:
                if r[k] is None:
                    r[k] = np.zeros((len(r["action"]), *like[k].shape[1:]), like[k].dtype)
        total = sum(len(r["action"]) for r in rows)
        self.cache = TableCache(Schema.of(rows[0]), 2 * total)  # the ring (half) holds every row
        done = 0
        for actor, r in enumerate(rows):
            done += len(r["action"])
            self.cache.append(r, done, actor_id=actor, first_seq=0)
        self.window, self.lookback = window, lookback
        self.episodes, self.transitions = len(rows), total
        self._rng = np.random.default_rng(seed)

    def sample(self, n: int) -> dict[str, np.ndarray]:
        """n rows, or n windows (`window` > 1), drawn uniformly over every recorded transition."""
        if self.window > 1:
            batch = self.cache.sample_windows(n, self.window, self._rng, lookback=self.lookback)
            assert batch is not None  # every episode is complete, so every start makes a window
            return batch
        return self.cache.sample(n, self._rng)
