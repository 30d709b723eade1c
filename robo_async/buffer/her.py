"""Hindsight experience replay (Andrychowicz et al. 2017) in the sampler: `algo.her=future|final`.

A goal-conditioned task (Gymnasium-Robotics' goal API: `achieved_goal`, `desired_goal`,
`compute_reward`) stores both goals in every row as observation features. When the sampler draws a
transition, a share `ratio` of the batch gets its desired goal replaced, in `obs/` and `next_obs/`
alike, by a goal the episode did achieve:

- `future`: the achieved goal after a row drawn uniformly from this one to the episode's end
  (as far as the cache holds it): HER's `future` with k = ratio / (1 - ratio) (0.8: k = 4);
- `final`: the achieved goal at the episode's last cached row.

The reward is then recomputed as the env computes it, sparse: `-(|achieved' - goal| > threshold)`
(0 when the row's next achieved goal is within the threshold of the new goal, else -1), and
`success` with it. The threshold is the env's (`GymRobot.goal_reward()`, checked at plan time
against the env's own `compute_reward`). The walk to the future row follows the cache's episode
links (`_Region.succ`), so it never crosses into another actor's stream or another episode.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

MAX_WALK = 1000  # at most this many rows ahead (episodes longer than that draw from their next 1,000)


class HerStrategy(StrEnum):
    """`algo.her`: which achieved goal replaces the desired one (none: no relabelling)."""

    none = "none"
    future = "future"
    final = "final"


@dataclass(frozen=True)
class Relabel:
    """What the sampler needs to relabel goals (see the module's docstring)."""

    strategy: HerStrategy
    threshold: float  # a row reaches a goal when its next achieved goal is within this distance (m)
    ratio: float = 0.8  # share of each batch relabelled
    achieved: str = "achieved_goal"  # the observation features holding each goal
    desired: str = "desired_goal"

    def __post_init__(self) -> None:
        if self.strategy is HerStrategy.none:
            raise ValueError("Relabel needs algo.her=future or final")
        if not 0.0 < self.ratio <= 1.0:
            raise ValueError(f"algo.her_ratio must be in (0, 1], not {self.ratio}")
        if not (np.isfinite(self.threshold) and self.threshold > 0):
            raise ValueError(f"algo.her_threshold must be a distance > 0, not {self.threshold}")

    @property
    def column(self) -> str:
        """The stored column whose value at the future row is the new goal."""
        return f"next_obs/{self.achieved}"


def future_slots(region, slots: np.ndarray, rng: np.random.Generator, final: bool) -> np.ndarray:
    """For each row at `slots` of a cache region: the slot of a row of the same actor's same
    episode, at or after it: the last one cached (`final`), or one drawn uniformly among them
    (reservoir sampling along the walk). A row whose successor is not cached is its own future."""
    ends = region.cols["terminated"] | region.cols["truncated"]
    cur, pick = slots.copy(), slots.copy()
    count = np.ones(len(slots))
    alive = (region.actor[slots] >= 0) & ~ends[slots]
    for _ in range(MAX_WALK):
        if not alive.any():
            break
        nxt = region.succ[cur]
        safe = np.where(nxt >= 0, nxt, 0)
        linked = (
            alive & (nxt >= 0) & (region.actor[safe] == region.actor[cur]) & (region.seq[safe] == region.seq[cur] + 1)
        )
        cur = np.where(linked, safe, cur)
        count += linked
        take = linked if final else linked & (rng.random(len(slots)) * count < 1.0)
        pick = np.where(take, cur, pick)
        alive = linked & ~ends[cur]
    return pick


def relabel(batch: dict[str, np.ndarray], goals: np.ndarray, rng: np.random.Generator, spec: Relabel) -> int:
    """Replace the desired goal of a `spec.ratio` share of `batch`'s rows by `goals` (achieved goals
    of their episodes, one per row), in place, with rewards and success recomputed; returns how many
    rows were relabelled."""
    which = rng.random(len(goals)) < spec.ratio
    if not which.any():
        return 0
    for prefix in ("obs/", "next_obs/"):
        g = batch[f"{prefix}{spec.desired}"].copy()
        g[which] = goals[which]
        batch[f"{prefix}{spec.desired}"] = g
    goal = batch[f"next_obs/{spec.desired}"][which]
    hit = np.linalg.norm(batch[spec.column][which] - goal, axis=-1) <= spec.threshold
    reward = batch["reward"].copy()
    reward[which] = np.where(hit, 0.0, -1.0)
    batch["reward"] = reward
    if "success" in batch:
        success = batch["success"].copy()
        success[which] = hit
        batch["success"] = success
    return int(which.sum())
