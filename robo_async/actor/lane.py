"""One robot's running episode in a `ControlLoop` (`Lane`; a vectorized actor steps several): its
reset, summary and jerk; the
check a row passes before it is kept (`nonfinite`), and the inline mode's choice of action per lane
(`inline_actions`: the policy on the control thread, each chunk executed whole).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from hal.safety import SafeRobot
from hal.spec import RobotSpec
from hal.teleop import Teleop, TeleopEventKind
from policies.base import ActionChunk, ChunkRequest, Policy
from robo_async.actor.records import Sink

if TYPE_CHECKING:
    from robo_async.actor.loop_config import LoopConfig
from robo_async.transport.wire import EpisodeStats


def nonfinite(
    obs: dict[str, np.ndarray], next_obs: dict[str, np.ndarray], reward: float, applied: np.ndarray
) -> str | None:
    """The first part of a row that is not finite (NaN or infinity), named; None when all are.
    Integer columns (camera frames) cannot be."""
    if not math.isfinite(reward):
        return "the reward"
    if not np.all(np.isfinite(applied)):
        return "the action"
    for prefix, o in (("observation", obs), ("next observation", next_obs)):
        for k, v in o.items():
            a = np.asarray(v)
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                return f"the {prefix} '{k}'"
    return None


@dataclass(eq=False)
class Lane:
    """One robot's running episode in a `ControlLoop` (a vectorized actor steps several)."""

    index: int
    robot: SafeRobot
    sink: Sink
    actor_id: int  # the stream its transitions and episodes go out under
    obs: dict[str, np.ndarray] = field(default_factory=dict)
    episode: int = 0  # this episode's number (resets are seeded by it)
    evaluation: bool = False
    ret: float = 0.0
    length: int = 0
    success: bool = False
    operator: int = 0  # ticks an operator drove
    chunk: ActionChunk | None = None  # inline: the chunk being executed, and where in it
    chunk_i: int = 0
    last_applied: np.ndarray | None = None
    # this episode's applied actions, for its jerk (the last 10,000: episodes without a time limit)
    commanded: deque[np.ndarray] = field(default_factory=lambda: deque(maxlen=10_000))

    def start(self, episode: int, seed: int, teleops: tuple[Teleop, ...], stop: Callable[[], bool]) -> None:
        """A new episode on this lane's robot, number `episode`, its reset seeded by it (a real arm:
        homed first, then the scene's reset, `teleops` polled meanwhile), and its counts zeroed."""
        self.chunk = None  # an inline chunk never runs into the next episode
        self.episode = episode
        reset = getattr(self.robot, "episode_reset", None)  # a real arm: home, then the scene's reset
        if reset is not None:
            reset.run(self.robot, teleops, stop=stop)
        self.obs = self.robot.reset(seed=seed * 100_003 + episode).as_dict()
        self.ret, self.length, self.success, self.operator = 0.0, 0, False, 0
        self.last_applied = None

    def summary(self, version: int, label: TeleopEventKind | None) -> EpisodeStats:
        """The finished episode's summary, under the policy `version` of its last row and the
        operator's `label` that ended it (if one did)."""
        return EpisodeStats(
            self.actor_id,
            self.episode,
            self.ret,
            self.length,
            self.success,
            version,
            self.evaluation,
            self.operator,
            label.value if label is not None else "",
        )

    def jerk(self, dt: float) -> float | None:
        """Mean |d3 action / dt3| (rad/s^3) of this episode's applied actions; None under four."""
        if len(self.commanded) < 4:
            return None
        a = np.asarray(self.commanded, np.float64)
        return float(np.abs(np.diff(a, n=3, axis=0)).mean() / dt**3)


def inline_actions(
    policy: Policy, lanes: list[Lane], spec: RobotSpec, rng: np.random.Generator, explore_until_weights: bool
) -> list[tuple[np.ndarray, int]]:
    """(action, policy version) per lane, on the calling (control) thread. A chunk is executed whole,
    as in every other mode (what chunk critics learn from), and the next one is asked for when it
    runs out: for several lanes, in one batched call per kind of episode (training or evaluation).
    Uniform random actions while the policy has no weights and `explore_until_weights`."""
    if policy.version < 0 and explore_until_weights:
        return [(rng.uniform(spec.low, spec.high).astype(np.float32), policy.version) for _ in lanes]
    need = [ln for ln in lanes if ln.chunk is None or ln.chunk_i >= len(ln.chunk.actions)]
    if len(lanes) == 1:
        if need:
            ln = need[0]
            ln.chunk, ln.chunk_i = policy.predict_chunk(ln.obs), 0
    else:
        for evaluation in (False, True):
            group = [ln for ln in need if ln.evaluation is evaluation]
            if group:
                policy.deterministic = evaluation
                for ln, chunk in zip(
                    group, policy.predict_chunks([ChunkRequest(ln.obs) for ln in group]), strict=False
                ):
                    ln.chunk, ln.chunk_i = chunk, 0
    out = []
    for ln in lanes:
        assert ln.chunk is not None
        ln.chunk_i += 1
        out.append((ln.chunk.actions[ln.chunk_i - 1], ln.chunk.policy_version))
    return out


def lanes_of(
    robot: SafeRobot | Sequence[SafeRobot],
    sink: Sink | Sequence[Sink] | None,
    config: LoopConfig,
    *,
    teleops: tuple[Teleop, ...],
    guide: Policy | None,
    policy: Policy,
) -> tuple[list[SafeRobot], list[Sink | None]]:
    """A `ControlLoop`'s robots and one sink each, checked: every robot behind the safety layer, and
    several simulators in one loop (`actor.envs`) only inline, as fast as they go, without teleops, a
    guide or a policy server (one batched policy call per tick)."""
    robots = list(robot) if isinstance(robot, Sequence) else [robot]
    sinks = list(sink) if isinstance(sink, Sequence) else [sink] * len(robots) if sink is None else [sink]
    for r in robots:
        if not isinstance(r, SafeRobot):
            raise TypeError(
                f"the control loop drives robots behind the safety layer; wrap {type(r).__name__} in "
                "hal.safety.SafeRobot"
            )
    if not robots or len(sinks) != len(robots):
        raise ValueError(f"the control loop needs one sink per robot: {len(robots)} robots, {len(sinks)} sinks")
    not_as_fast = config.inference != "inline" or teleops or guide is not None or config.realtime
    if len(robots) > 1 and (not_as_fast or getattr(policy, "remote", False)):
        raise ValueError(
            f"{len(robots)} simulators in one loop (actor.envs) step as fast as they go with inline "
            f"inference and one batched policy call per tick: no asynchronous inference, "
            f"real time, teleops, guide or policy server"
        )
    return robots, sinks
