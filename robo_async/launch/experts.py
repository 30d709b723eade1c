"""Scripted experts as policies, and their demonstrations: recorded by the one control loop
behind the safety layer, into memory (`robo-async bc`, benchmarks) or into a store's `demos` table
(`robo-async buffer demos`), the expert running as a `ScriptedPolicy` in `inline` mode (it reads
the simulator's state). Also the JSRL guide `actor.guide=expert`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from hal.safety import SafeRobot
from policies.scripted import ScriptedPolicy
from robo_async.actor.adder import Adder
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.buffer.tools import IMPORT_ACTOR_BASE
from robo_async.launch.tasks import TaskArgs, make_robot
from robo_async.transport.wire import EpisodeStats, Heartbeat, Message, TransitionBatch
from sim.experts import NoExpert, make_expert

__all__ = ["EpisodeCollector", "NoExpert", "StoreOutlet", "expert_policy", "record_demos", "record_expert"]


def expert_policy(
    targs: TaskArgs, robot: SafeRobot, max_step: float | None = None, miss: bool = False
) -> ScriptedPolicy:
    """The task's scripted expert (or, `miss`, its scripted near miss) as a policy (`max_step`: rad
    per tick). Raises `NoExpert` for a task without one."""
    expert = make_expert(targs.name, robot, max_step, miss)
    return ScriptedPolicy(expert.act, robot.spec.dt, f"{targs.name}-{'miss' if miss else 'expert'}")


class StoreOutlet:
    """An `Adder` outlet that writes straight into a store table."""

    def __init__(self, store: PersistentReplayStore, table: str) -> None:
        self.store, self.table = store, table

    def put(self, msg: Message) -> None:
        if isinstance(msg, TransitionBatch):
            self.store.insert(msg, self.table)


class EpisodeCollector:
    """A loop sink keeping whole episodes in memory: `obs/<key>` and `action` stacked per episode
    (the layout behaviour cloning samples from)."""

    def __init__(self, progress: Callable[[int], None] | None = None) -> None:
        self.episodes: list[dict[str, np.ndarray]] = []
        self.successes: list[bool] = []
        self._rows: dict[str, list[np.ndarray]] = {}
        self._progress = progress

    def add(
        self,
        obs: dict[str, np.ndarray],
        action: np.ndarray,
        reward: float,
        next_obs: dict[str, np.ndarray],
        terminated: bool,
        truncated: bool,
        policy_version: int,
        success: bool = False,
        intervention: int = 0,
        policy_action: np.ndarray | None = None,
    ) -> None:
        for k, v in obs.items():
            self._rows.setdefault(f"obs/{k}", []).append(np.asarray(v))
        self._rows.setdefault("action", []).append(np.asarray(action, np.float32))

    def send_episode(self, stats: EpisodeStats) -> None:
        self.episodes.append({k: np.stack(v) for k, v in self._rows.items()})
        self.successes.append(stats.success)
        self._rows = {}
        if self._progress is not None:
            self._progress(len(self.episodes))

    def send_heartbeat(self, beat: Heartbeat) -> None:
        pass

    def flush(self) -> None:
        pass


def _robot(targs: TaskArgs) -> SafeRobot:
    return SafeRobot(make_robot(targs))


def record_expert(
    targs: TaskArgs,
    episodes: int,
    seed: int = 0,
    max_step: float | None = None,
    until_terminated: bool = False,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, np.ndarray]]:
    """Expert episodes in memory, `episode_ticks` long each (the expert keeps holding the goal
    after success: BC learns to stay), or until the task ends one with `until_terminated`.
    Episode k resets with seed `seed * 100_003 + k`."""
    robot = _robot(targs)
    sink = EpisodeCollector(progress)
    robot.connect()
    try:
        loop = ControlLoop(
            robot,
            expert_policy(targs, robot, max_step),
            LoopConfig(
                episode_ticks=targs.episode_ticks(),
                seed=seed,
                eval_every=1,
                max_episodes=episodes,
                inference="inline",
                end_on_terminated=until_terminated,
            ),
            sink=sink,
        )
        loop.run()
    finally:
        robot.close()
    return sink.episodes


class _Tee(EpisodeCollector):
    """Forwards to an `Adder` and counts finished episodes."""

    def __init__(self, adder: Adder, progress: Callable[[int], None] | None) -> None:
        super().__init__(progress)
        self.adder = adder

    def add(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        self.adder.add(*args, **kwargs)

    def send_episode(self, stats: EpisodeStats) -> None:
        self.adder.send_episode(stats)
        self.successes.append(stats.success)
        if self._progress is not None:
            self._progress(len(self.successes))

    def flush(self) -> None:
        self.adder.flush()


def record_demos(
    targs: TaskArgs,
    out: Path,
    episodes: int,
    seed: int = 0,
    table: str = "demos",
    progress: Callable[[int], None] | None = None,
    max_step: float | None = None,
    until_terminated: bool = True,
    miss: bool = False,
) -> tuple[int, float]:
    """Scripted-expert episodes into `out` (a new or existing store), each until the task ends
    it (or, with `until_terminated=False`, on to `episode_ticks`: the expert holds the goal) or
    `episode_ticks`; `miss`: the task's scripted near miss acts (failure episodes). Returns
    (transitions, success rate)."""
    robot = _robot(targs)
    robot.connect()
    try:  # the expert first: a task without one is refused before any store is made
        policy = expert_policy(targs, robot, max_step, miss)
    except BaseException:
        robot.close()
        raise
    try:
        store = PersistentReplayStore(out, StoreConfig()).open()
    except BaseException:
        robot.close()
        raise
    demo_actor = IMPORT_ACTOR_BASE - 1  # demos are numbered apart from live actors
    start = store.ack(demo_actor)
    sink = _Tee(Adder(demo_actor, StoreOutlet(store, table), 256, start_seq=start), progress)
    try:
        ControlLoop(
            robot,
            policy,
            LoopConfig(
                episode_ticks=targs.episode_ticks(),
                seed=seed,
                eval_every=1,
                max_episodes=episodes,
                inference="inline",
                end_on_terminated=until_terminated,
            ),
            sink=sink,
        ).run()
        store.flush()
        return sink.adder.seq - start, float(np.mean(sink.successes)) if sink.successes else 0.0
    finally:
        robot.close()
        store.close()
