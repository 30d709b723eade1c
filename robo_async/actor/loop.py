"""The one control loop. Every robot in every command is driven by `ControlLoop.run`: training
actors, `eval`, `bc` evaluation, demo recording and the benchmarks. Always behind `SafeRobot`.

What differs between those is a parameter or a part plugged in, never a copy of the loop:

    loop = ControlLoop(safe_robot, policy, LoopConfig(episode_ticks=50, realtime=True),
                       sink=adder,            # where transitions go (None: nowhere, e.g. eval)
                       weights=client.take_weights,  # new weights between ticks (None: fixed)
                       gate=allowance,        # as-fast-as-possible training: wait for the learner
                       teleops=teleops, observer=on_tick)
    result = loop.run(stop)                   # episodes, ticks, lateness

Per tick: pace (real time: tick k starts at t0 + k*dt; a late tick restarts the pacing, never
catches up), swap weights if new ones arrived (the inference thread loads them; `inline` loads
here), poll teleops (`takeover.Operators`: an e-stop from any latches the robot's; takeovers,
releases and labels), choose the action (the async chunk runner, which never waits on the policy;
or `inline`: the policy on this thread, the sim-only speed mode, each chunk executed whole; while
an operator has control, theirs, with the policy's beside it for the record), send it through the
safety layer, observe, hand the transition to the sink. A takeover or a release drops the policy's
plan: its next chunk is asked about the state the operator left, and the robot holds the
operator's last target until it lands (no jump).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event
from threading import Event as ThreadEvent

import numpy as np

from hal.safety import SafeRobot
from hal.teleop import Teleop, TeleopEventKind
from policies.base import ActionChunk, ChunkRequest, Policy, WeightsMismatch, check_architecture
from robo_async.actor.guide import GuideConfig, JsrlGuide
from robo_async.actor.inference import INFERENCE_MODES, AsyncChunkRunner, InferenceEngine
from robo_async.actor.options import ActorOptions, InferenceMode, Replan
from robo_async.actor.records import EpisodeLog, LatenessTracker, Sink
from robo_async.actor.takeover import Operators
from robo_async.transport.options import as_choices
from robo_async.transport.stats import ActorStats, Figure, histogram
from robo_async.transport.wire import OPERATOR, POLICY, TAKEOVER, EpisodeStats, Heartbeat, Weights

log = logging.getLogger(__name__)


def _nonfinite(
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


REALTIME_SWITCH_S = 0.0005  # GIL switch interval while a real-time loop runs (see ControlLoop.run)


@dataclass(frozen=True)
class LoopConfig:
    """How one `ControlLoop` runs: episode length, pacing, seeds, the inference mode and replanning,
    heartbeats. Training actors get it from `from_options` (the `actor:` section, `ActorOptions`);
    eval, bc and benchmarks fill it directly. A field named as an `actor.*` key takes its default
    from `ActorOptions` (the one definition); `inference`, `replan` and `guide_schedule` are derived:
    the mode and rule `auto` resolved to, and JSRL's curriculum."""

    actor_id: int = 0  # stamped on episode summaries and heartbeats
    episode_ticks: int = 50  # truncate episodes after this many ticks (training: the task's `episode_ticks`)
    realtime: bool = False  # pace ticks at the robot's hz (real robots always); else as fast as possible
    seed: int = 0  # episode k resets with seed * 100_003 + k
    start_episode: int = 0
    eval_every: int = ActorOptions.eval_every  # every n-th episode runs the deterministic policy (1: all, 0: never)
    max_steps: int | None = None  # stop after this many ticks
    max_episodes: int | None = None  # stop after this many finished episodes
    heartbeat_s: float = ActorOptions.heartbeat_s
    # resolved (never auto): inline is the policy on this thread (sim only); `actor.inference` asks for one
    inference: InferenceMode = InferenceMode.inline
    inference_timeout_s: float = 2.0  # an inference running longer is reported; the robot holds
    inference_workers: int = ActorOptions.inference_workers  # inferences in flight at once (pipelined when > 1)
    # resolved (never auto): due: next chunk when the committed actions fall to latency + 1; end: the same
    # moment, about the tick the current chunk ends (every action executes: chunked critics); continuous:
    # whenever the engine is idle
    replan: Replan = Replan.due
    explore_until_weights: bool = True  # uniform random actions while the policy has no weights (v < 0)
    end_on_terminated: bool = True  # False: run on to episode_ticks after the task ends (expert demos)
    warmup_inference: bool = True  # run the policy twice before the first tick (torch's slow first call)
    # JSRL: a guide acts first in training episodes (inline, sim only), on this curriculum
    guide_schedule: GuideConfig | None = None
    success_reward: float = ActorOptions.success_reward  # an operator's success label: the reward is at least this
    teleop_drives: bool = False  # a teleop session: the operator drives from the first tick (robo-async teleop)
    server_wait_s: float = ActorOptions.server_wait_s  # a policy on a server: wait this long for it to answer first

    def __post_init__(self) -> None:
        as_choices(self, "loop")

    @classmethod
    def from_options(
        cls,
        options: ActorOptions,
        *,
        inference: InferenceMode,
        replan: Replan,
        actor_id: int = 0,
        episode_ticks: int = 50,
        realtime: bool = False,
        seed: int = 0,
        start_episode: int = 0,
    ) -> LoopConfig:
        """A training actor's loop: `options`' keys as they are, the inference mode and replanning
        rule as resolved (the launch layer decides `auto`: it knows the task and the algorithm), the
        JSRL curriculum where `actor.guide` is set. A ValueError names a key that cannot run."""
        return cls(
            actor_id=actor_id,
            episode_ticks=episode_ticks,
            realtime=realtime,
            seed=seed,
            start_episode=start_episode,
            eval_every=options.eval_every,
            heartbeat_s=options.heartbeat_s,
            inference=inference,
            inference_workers=options.inference_workers,
            replan=replan,
            guide_schedule=GuideConfig.from_options(options) if options.guide else None,
            success_reward=options.success_reward,
            server_wait_s=options.server_wait_s,
        )


@dataclass(frozen=True)
class TickInfo:
    """What an observer sees after each tick (benchmarks, video)."""

    tick: int  # since the loop started
    episode_tick: int  # since the episode started (0-based)
    episode: int
    action: np.ndarray  # what the loop chose (before safety)
    applied: np.ndarray  # what the robot got
    chosen_at: float  # monotonic time the action was chosen
    lateness_s: float  # how late this tick started against its schedule (0 when not real time)
    obs_tick: int  # the tick whose observation the action was computed from (-1: hold / inline)
    new_chunks: int  # chunks merged into the schedule so far (async modes)
    lane: int = 0  # which of the loop's robots (a vectorized actor's simulators)


@dataclass
class LoopResult:
    """What `ControlLoop.run()` returns: ticks run, per-episode stats, tick lateness (ms) and why it stopped."""

    ticks: int = 0
    episodes: list[EpisodeStats] = field(default_factory=list)
    lateness_p50_ms: float = 0.0
    lateness_p99_ms: float = 0.0
    lateness_max_ms: float = 0.0
    missed_ticks: int = 0  # ticks that started more than half a period late
    stop_reason: str = ""
    seconds: float = 0.0  # wall-clock time from the first tick to the end (excludes connect/warm-up)


@dataclass(eq=False)
class _Lane:
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


class ControlLoop:
    """The one control loop: drives a `SafeRobot` at its rate in every command (train, eval, bc,
    demos, teleop, benchmarks); commands differ only by the plug-ins given here.

        loop = ControlLoop(robot, policy, LoopConfig(...), sink=adder, weights=client.take_weights)
        robot.connect(); result = loop.run(stop); robot.close()

    Each tick: pace, swap in new weights, poll teleops, act (chunk runner or operator) through the
    safety layer, observe, hand the transition to `sink`. It never waits on inference, the network
    or the disk."""

    def __init__(
        self,
        robot: SafeRobot | Sequence[SafeRobot],
        policy: Policy,
        config: LoopConfig,
        *,
        sink: Sink | Sequence[Sink] | None = None,
        weights: Callable[[], Weights | None] | None = None,
        gate: Callable[[], bool] | None = None,
        teleops: tuple[Teleop, ...] = (),
        observer: Callable[[TickInfo], None] | None = None,
        stats: Callable[[], ActorStats] | None = None,
        guide: Policy | None = None,
    ) -> None:
        robots = list(robot) if isinstance(robot, Sequence) else [robot]
        sinks = list(sink) if isinstance(sink, Sequence) else [sink] * len(robots) if sink is None else [sink]
        for r in robots:
            if not isinstance(r, SafeRobot):
                raise TypeError(
                    f"the control loop drives robots behind the safety layer; wrap "
                    f"{type(r).__name__} in hal.safety.SafeRobot"
                )
        if not robots or len(sinks) != len(robots):
            raise ValueError(f"the control loop needs one sink per robot: {len(robots)} robots, {len(sinks)} sinks")
        if len(robots) > 1 and (
            config.inference != "inline"
            or teleops
            or guide is not None
            or config.realtime
            or getattr(policy, "remote", False)
        ):
            raise ValueError(
                f"{len(robots)} simulators in one loop (actor.envs) step as fast as they go with inline "
                f"inference and one batched policy call per tick: no asynchronous inference, "
                f"real time, teleops, guide or policy server"
            )
        robot = robots[0]
        self.remote = bool(getattr(policy, "remote", False))  # on a policy server (actor/remote.py)
        if self.remote and INFERENCE_MODES[config.inference] is None:
            raise ValueError(
                "a policy on a policy server needs an asynchronous inference mode (e.g. "
                "async_forward): inline would wait on the network on the control thread"
            )
        if self.remote:
            weights = None  # the server gets the learner's weights itself
        self.robot, self.policy, self.config = robot, policy, config
        # one lane per robot (a vectorized actor steps several simulators; every other loop, one)
        self.lanes = [
            _Lane(
                i,
                r,
                s if s is not None else EpisodeLog(),
                config.actor_id if len(robots) == 1 else int(getattr(s, "actor_id", config.actor_id)),
            )
            for i, (r, s) in enumerate(zip(robots, sinks, strict=False))
        ]
        self.sink = self.lanes[0].sink  # heartbeats go here (the actor's)
        self._weights, self._gate, self._observer, self._extra_stats = weights, gate, observer, stats
        self.teleops = teleops
        self._stop_event: Event | ThreadEvent | None = None
        self.operators = Operators(teleops, robot, config.teleop_drives) if teleops else None  # who drives, per tick
        self.tick = 0
        self.env_steps = 0
        self.episodes = config.start_episode  # finished (and skipped) episodes, numbered on from start_episode
        self.nonfinite = 0  # rows not kept (and policy actions replaced) for a NaN or infinity
        self._next_episode = config.start_episode  # the number the next reset gives its episode
        self.versions_seen: list[int] = []
        self._rng = np.random.default_rng(config.seed)
        if guide is not None and (config.guide_schedule is None or config.inference != "inline"):
            raise ValueError("a guide policy (JSRL) needs config.guide_schedule and inline inference (sim only)")
        # JSRL: the guide policy acts first in training episodes (actor/guide.py)
        self.guide = (
            JsrlGuide(guide, config.guide_schedule) if guide is not None and config.guide_schedule is not None else None
        )
        self.train_jerk: deque[float] = deque(maxlen=20)  # mean |d3 action / dt3| (rad/s^3) of training episodes
        self._bad_weights_logged: set[int] = set()
        self.lateness = LatenessTracker(robot.spec.dt)
        self.runner: AsyncChunkRunner | None = None
        merge_forward = INFERENCE_MODES[config.inference]
        if merge_forward is not None:
            merge, forward = merge_forward
            engine = InferenceEngine(
                policy, robot.spec.action_dim, policy.horizon, config.inference_timeout_s, config.inference_workers
            )
            self.runner = AsyncChunkRunner(engine, robot.spec, merge, forward, replan=config.replan)

    # --- parts of a tick -------------------------------------------------------------------
    def _swap_weights(self) -> None:
        w = self._weights() if self._weights is not None else None
        if w is None:
            return
        try:
            check_architecture(w.version, w.architecture, self.policy, "this actor")
            if self.runner is not None:  # an inference thread loads them between two chunks
                self.runner.engine.swap_weights(w.version, w.arrays)
            else:
                self.policy.load_weights(w.version, w.arrays)
            self.versions_seen.append(w.version)
            del self.versions_seen[:-1000]
        except WeightsMismatch as e:
            if w.version not in self._bad_weights_logged and len(self._bad_weights_logged) < 100:
                log.error("rejected weights, keeping v%d: %s", self.policy.version, e)
                self._bad_weights_logged.add(w.version)

    def _is_eval(self, episode: int) -> bool:
        n = self.config.eval_every
        return n > 0 and self.policy.version >= 0 and episode % n == n - 1

    def _inline(self, lanes: list[_Lane]) -> list[tuple[np.ndarray, int]]:
        """(action, policy version) per lane, on this thread. A chunk is executed whole, as in
        every other mode (what chunk critics learn from), and the next one is asked for when it
        runs out: for several lanes, in one batched call per kind of episode (training or
        evaluation)."""
        if self.policy.version < 0 and self.config.explore_until_weights:
            spec = self.robot.spec
            return [(self._rng.uniform(spec.low, spec.high).astype(np.float32), self.policy.version) for _ in lanes]
        need = [ln for ln in lanes if ln.chunk is None or ln.chunk_i >= len(ln.chunk.actions)]
        if len(lanes) == 1:
            if need:
                ln = need[0]
                ln.chunk, ln.chunk_i = self.policy.predict_chunk(ln.obs), 0
        else:
            for evaluation in (False, True):
                group = [ln for ln in need if ln.evaluation is evaluation]
                if group:
                    self.policy.deterministic = evaluation
                    for ln, chunk in zip(
                        group, self.policy.predict_chunks([ChunkRequest(ln.obs) for ln in group]), strict=False
                    ):
                        ln.chunk, ln.chunk_i = chunk, 0
        out = []
        for ln in lanes:
            assert ln.chunk is not None
            ln.chunk_i += 1
            out.append((ln.chunk.actions[ln.chunk_i - 1], ln.chunk.policy_version))
        return out

    def actor_stats(self) -> ActorStats:
        """Heartbeat figures: safety counters, tick lateness, inference latency, and those of the
        operators, a remote policy and the actor around this loop (`stats=`)."""
        sts = [ln.robot.stats for ln in self.lanes]
        parts = [
            ActorStats(
                clipped=sum(st.clipped for st in sts),
                rejected=sum(st.rejected for st in sts),
                workspace=sum(st.workspace for st in sts),
                estopped=sum(st.estopped for st in sts),
                clipped_step=sum(st.clipped_step + st.clipped_velocity for st in sts),
                clipped_accel=sum(st.clipped_accel for st in sts),
                max_step_rad=round(max(min(st.max_step_seen, 1e6) for st in sts), 6),
                watchdog_holds=sum(st.watchdog_holds for st in sts),
                torque_offs=sum(st.torque_offs for st in sts),
                stops=sum(st.stops for st in sts),
                nonfinite=self.nonfinite,
                late_p99_ms=round(self.lateness.percentile_ms(99), 3),
                missed_ticks=self.lateness.missed,
                late_hist=histogram(np.asarray(self.lateness.samples) * 1000, "late_hist")
                if self.lateness.samples
                else None,
                guide_ticks=self.guide.ticks if self.guide is not None else None,
                train_jerk=round(float(np.mean(self.train_jerk)), 1) if self.train_jerk else None,
            )
        ]
        if self.operators is not None:
            parts.append(self.operators.stats())
        if self.runner is not None:
            e = self.runner.engine
            parts.append(
                ActorStats(
                    infer_p50_ms=round(e.latency.percentile(50) * 1000, 2),
                    infer_p95_ms=round(e.latency.percentile(95) * 1000, 2),
                    infer_hist=histogram(np.asarray(e.latency.samples) * 1000, "infer_hist")
                    if e.latency.samples
                    else None,
                    held_ticks=self.runner.holds,
                    bad_chunks=e.bad_chunks,
                    hung=e.hung_reports,
                    stale_dropped=self.runner.schedule.stale_dropped,
                    latency_ticks=self.runner.latency_ticks(),
                )
            )
        if self.remote:
            parts.append(self.policy.stats())  # type: ignore[attr-defined]
        if self._extra_stats is not None:
            parts.append(self._extra_stats())
        return ActorStats.merge(*parts)

    def stats(self) -> dict[str, Figure]:
        """The heartbeat figures this loop has, by name (evaluation and benchmark summaries)."""
        return self.actor_stats().figures()

    def _drop_plan(self, hold: np.ndarray | None) -> None:
        """A takeover or a release: forget the policy's plan (inline chunk, async schedule and the
        chunks in flight); its next chunk is asked about the state now."""
        self.lanes[0].chunk = None
        if self.runner is not None:
            self.runner.drop_plan(hold)

    def _reset(self, lane: _Lane) -> dict[str, np.ndarray]:
        """A new episode on this lane's robot, seeded by its number, and its bookkeeping."""
        lane.chunk = None  # an inline chunk never runs into the next episode
        if self.guide is not None:
            self.guide.reset()
        lane.episode, self._next_episode = self._next_episode, self._next_episode + 1
        reset = getattr(lane.robot, "episode_reset", None)  # a real arm: home, then the scene's reset
        if reset is not None:
            stop = self._stop_event
            reset.run(lane.robot, self.teleops, stop=(lambda: stop is not None and stop.is_set()))
        lane.obs = lane.robot.reset(seed=self.config.seed * 100_003 + lane.episode).as_dict()
        lane.ret, lane.length, lane.success, lane.operator = 0.0, 0, False, 0
        lane.last_applied = None
        lane.evaluation = self._is_eval(lane.episode)
        return lane.obs

    def _end_episode(self, lane: _Lane, version: int, label: TeleopEventKind | None, result: LoopResult) -> None:
        """The episode's summary to its lane's sink and the result; JSRL's schedule; its jerk."""
        stats = EpisodeStats(
            lane.actor_id,
            lane.episode,
            lane.ret,
            lane.length,
            lane.success,
            version,
            lane.evaluation,
            lane.operator,
            label.value if label is not None else "",
        )
        lane.sink.send_episode(stats)
        result.episodes.append(stats)
        del result.episodes[:-1000]  # bounded on days-long runs
        if self.guide is not None and not lane.evaluation:
            self.guide.episode_ended(lane.success)
        if not lane.evaluation and len(lane.commanded) >= 4:
            a = np.asarray(lane.commanded, np.float64)
            self.train_jerk.append(float(np.abs(np.diff(a, n=3, axis=0)).mean() / self.robot.spec.dt**3))
        lane.commanded.clear()
        self.episodes += 1

    def _step_lane(
        self,
        ln: _Lane,
        action: np.ndarray,
        version: int,
        label: TeleopEventKind | None,
        lateness: float,
        result: LoopResult,
    ) -> bool:
        """One lane's tick after the action is chosen: an operator's action in its place (the
        policy's kept beside it), the safety layer, the outcome, the row to the sink (none that is
        not finite: the episode ends there), the observer; True when the episode ended."""
        cfg, robot, ops, runner = self.config, self.robot, self.operators, self.runner
        obs = ln.obs
        intervention, policy_action = POLICY, None
        if ops is not None and ops.active is not None:  # (one lane: teleops drive one robot)
            intervention, policy_action = (TAKEOVER if ops.first else OPERATOR), action
            op = ops.action()
            if op is None:  # the device was lost: hold this tick, the policy has control again
                op = ln.last_applied if ln.last_applied is not None else robot.spec.hold_action(obs["state"])
                self._drop_plan(op)
            action = op
            ln.operator += 1
        elif ops is not None and ops.lost_driver and ln.last_applied is not None:
            action = ln.last_applied  # the driver's device was lost in this tick's poll: hold this tick
        chosen_at = time.monotonic() if self._observer is not None else 0.0
        applied = ln.robot.send_action(action)
        ln.last_applied = applied
        ln.commanded.append(applied)
        out = ln.robot.outcome()
        next_obs = ln.robot.get_observation().as_dict()
        ln.length += 1
        terminated = out.terminated and cfg.end_on_terminated
        reward, success = out.reward, out.success
        if label is TeleopEventKind.SUCCESS:  # the operator's judgement ends the episode
            terminated, success, reward = True, True, max(reward, cfg.success_reward)
        truncated = (ln.length >= cfg.episode_ticks or label is not None or out.truncated) and not terminated
        if policy_action is not None:  # what the policy would have done, inside the robot's limits
            policy_action = np.clip(policy_action, robot.spec.low, robot.spec.high).astype(np.float32)
            if not np.all(np.isfinite(policy_action)):  # a policy's NaN: not what the row keeps
                policy_action = applied
                self.nonfinite += 1
        cut = _nonfinite(obs, next_obs, reward, applied)
        if cut is None:
            ln.sink.add(
                obs,
                applied,
                reward,
                next_obs,
                terminated,
                truncated,
                version,
                success,
                intervention=intervention,
                policy_action=policy_action,
            )
        else:  # nothing non-finite is sent (the learner would refuse it): the episode ends here
            self.nonfinite += 1
            if self.nonfinite <= 20 or self.nonfinite % 1000 == 0:
                log.warning(
                    "actor %d: %s is not finite (NaN or inf) at tick %d of episode %d: the row is "
                    "not kept and the episode ends (%d so far)",
                    ln.actor_id,
                    cut,
                    ln.length - 1,
                    ln.episode,
                    self.nonfinite,
                )
            reward, truncated = 0.0, True
        if self._observer is not None:
            self._observer(
                TickInfo(
                    self.tick,
                    ln.length - 1,
                    ln.episode,
                    action,
                    applied,
                    chosen_at,
                    lateness,
                    runner.schedule.popped_obs_tick if runner is not None else -1,
                    runner.chunks_merged if runner is not None else 0,
                    ln.index,
                )
            )
        self.env_steps += 1
        ln.ret += reward
        ln.success = ln.success or success
        ln.obs = next_obs
        if terminated or truncated:
            self._end_episode(ln, version, label, result)
            return True
        return False

    # --- the loop --------------------------------------------------------------------------
    def run(self, stop: Event | ThreadEvent | None = None) -> LoopResult:
        """Drive the robot until `stop`, `max_steps`, `max_episodes` or the gate says stop. The
        robot must be connected; the caller closes it. The inference engine is closed on return."""
        switch = sys.getswitchinterval()
        if self.config.realtime:
            # When the control thread wakes for its tick while another thread (uplink, inference,
            # weights) runs Python, it waits for the GIL up to the switch interval (5 ms by
            # default): the tick's lateness. 0.5 ms bounds that wait.
            sys.setswitchinterval(min(switch, REALTIME_SWITCH_S))
        try:
            return self._run(stop)
        finally:
            sys.setswitchinterval(switch)
            for ln in self.lanes:
                ln.sink.flush()
            if self.runner is not None:
                self.runner.engine.close()

    def _run(self, stop: Event | ThreadEvent | None) -> LoopResult:
        cfg, robot, runner, lanes = self.config, self.robot, self.runner, self.lanes
        self._stop_event = stop
        result = LoopResult()
        for ln in lanes:
            self._reset(ln)
        lane0 = lanes[0]
        if self.remote:  # hello: the server's architecture and horizon, or its refusal, named
            self.policy.connect(cfg.server_wait_s, stop)  # type: ignore[attr-defined]
        if runner is not None and cfg.warmup_inference:  # torch's slow first call; seeds the latency
            runner.engine.warmup(lane0.obs)
        lane0.evaluation = self._is_eval(lane0.episode)
        ops = self.operators
        self.policy.deterministic = lane0.evaluation
        dt = robot.spec.dt
        next_beat = time.monotonic() + cfg.heartbeat_s
        next_tick = time.monotonic()
        max_steps = math.inf if cfg.max_steps is None else cfg.max_steps
        max_episodes = math.inf if cfg.max_episodes is None else cfg.max_episodes
        finished = 0
        t_start = time.monotonic()
        while True:
            if stop is not None and stop.is_set():
                result.stop_reason = "stopped"
                break
            if self.env_steps >= max_steps:
                result.stop_reason = "max_steps"
                break
            lateness = 0.0
            if cfg.realtime:  # tick k starts at t0 + k * dt; a late tick restarts the pacing
                now = time.monotonic()
                if now < next_tick:
                    time.sleep(next_tick - now)
                    now = time.monotonic()
                lateness = now - next_tick
                self.lateness.add(lateness)
                next_tick = now + dt if lateness > dt else next_tick + dt
            if self._weights is not None:
                self._swap_weights()
            label = None
            if ops is not None:
                label = ops.poll(lane0.obs, lane0.evaluation)
                if ops.first or ops.released:
                    self._drop_plan(lane0.last_applied)
            if self._gate is not None and not self._gate():
                result.stop_reason = "gate"
                break
            if self.guide is not None and self.guide.acts(lane0.length, lane0.evaluation):
                # the row carries the learning policy's version: the episode is the learner's, the guide only starts it
                chosen = [(self.guide.action(lane0.obs), self.policy.version)]
            elif runner is not None:
                chosen = [(runner.tick(self.tick, lane0.obs), runner.version)]
            else:
                chosen = self._inline(lanes)
            for ln, (action, version) in zip(lanes, chosen, strict=False):
                if self._step_lane(ln, action, version, label, lateness, result):  # its episode ended
                    finished += 1
                    if finished >= max_episodes:
                        break
                    self._reset(ln)
                    if runner is not None:
                        runner.reset()
                    if len(lanes) == 1:
                        self.policy.deterministic = ln.evaluation
                    if cfg.realtime:  # a reset may take a while on a real robot: restart the pacing
                        next_tick = time.monotonic()
            self.tick += 1
            if finished >= max_episodes:
                result.stop_reason = "max_episodes"
                break
            if time.monotonic() >= next_beat:
                next_beat += cfg.heartbeat_s
                self.sink.send_heartbeat(
                    Heartbeat(cfg.actor_id, self.env_steps, self.policy.version, self.actor_stats())
                )
        result.ticks = self.env_steps
        result.seconds = time.monotonic() - t_start
        result.lateness_p50_ms = self.lateness.percentile_ms(50)
        result.lateness_p99_ms = self.lateness.percentile_ms(99)
        result.lateness_max_ms = self.lateness.max * 1000
        result.missed_ticks = self.lateness.missed
        return result
