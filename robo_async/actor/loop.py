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
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.synchronize import Event
from threading import Event as ThreadEvent

import numpy as np

from hal.safety import SafeRobot
from hal.teleop import Teleop, TeleopEventKind
from policies.base import Policy, WeightsMismatch, check_architecture
from robo_async.actor.curriculum import StartCurriculum
from robo_async.actor.guide import JsrlGuide
from robo_async.actor.inference import AsyncChunkRunner, InferenceEngine
from robo_async.actor.inference_modes import INFERENCE_MODES
from robo_async.actor.lane import Lane, inline_actions, lanes_of, nonfinite
from robo_async.actor.loop_config import LoopConfig, LoopResult, TickInfo
from robo_async.actor.loop_stats import inference_stats, robot_stats
from robo_async.actor.pacing import Pacer, realtime_switch_interval
from robo_async.actor.records import EpisodeLog, LatenessTracker, Sink
from robo_async.actor.takeover import Operators
from robo_async.transport.stats import ActorStats, Figure
from robo_async.transport.wire import OPERATOR, POLICY, TAKEOVER, Heartbeat, Weights

log = logging.getLogger(__name__)


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
        robots, sinks = lanes_of(robot, sink, config, teleops=teleops, guide=guide, policy=policy)
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
            Lane(
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
        # a scene that starts at random: training episodes from a range widening with success (actor/curriculum.py)
        self.curriculum = StartCurriculum.of(config.start_schedule, [r.inner for r in robots])
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

    def actor_stats(self) -> ActorStats:
        """Heartbeat figures: safety counters, tick lateness, inference latency, and those of the
        operators, a remote policy and the actor around this loop (`stats=`)."""
        parts = [robot_stats(self.lanes, self.lateness, self.nonfinite, self.guide, self.train_jerk, self.curriculum)]
        if self.operators is not None:
            parts.append(self.operators.stats())
        if self.runner is not None:
            parts.append(inference_stats(self.runner))
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

    def _reset(self, lane: Lane) -> dict[str, np.ndarray]:
        """A new episode on this lane's robot, seeded by its number, and its bookkeeping."""
        if self.guide is not None:
            self.guide.reset()
        episode, self._next_episode = self._next_episode, self._next_episode + 1
        evaluation = self._is_eval(episode)
        if self.curriculum is not None:  # (evaluation episodes start from the whole range)
            self.curriculum.place(lane.robot.inner, evaluation)
        stop = self._stop_event
        lane.start(episode, self.config.seed, self.teleops, lambda: stop is not None and stop.is_set())
        lane.evaluation = evaluation
        return lane.obs

    def _end_episode(self, lane: Lane, version: int, label: TeleopEventKind | None, result: LoopResult) -> None:
        """The episode's summary to its lane's sink and the result; the curricula; its jerk."""
        stats = lane.summary(version, label)
        lane.sink.send_episode(stats)
        result.episodes.append(stats)
        del result.episodes[:-1000]  # bounded on days-long runs
        for curriculum in (self.guide, self.curriculum) if not lane.evaluation else ():
            if curriculum is not None:
                curriculum.episode_ended(lane.success)
        if not lane.evaluation and (jerk := lane.jerk(self.robot.spec.dt)) is not None:
            self.train_jerk.append(jerk)
        lane.commanded.clear()
        self.episodes += 1

    def _step_lane(
        self,
        ln: Lane,
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
        cut = nonfinite(obs, next_obs, reward, applied)
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
        try:
            with realtime_switch_interval(self.config.realtime):  # bounds a tick's wait for the GIL
                return self._run(stop)
        finally:
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
        if self.curriculum is None:  # (with one, the reset's range already followed the episode's kind)
            lane0.evaluation = self._is_eval(lane0.episode)
        ops = self.operators
        self.policy.deterministic = lane0.evaluation
        next_beat = time.monotonic() + cfg.heartbeat_s
        pacer = Pacer(robot.spec.dt, self.lateness)
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
            lateness = pacer.wait() if cfg.realtime else 0.0  # tick k starts at t0 + k * dt
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
                chosen = inline_actions(self.policy, lanes, robot.spec, self._rng, cfg.explore_until_weights)
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
                        pacer.restart()
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
