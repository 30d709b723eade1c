"""The actor: runs one robot's control loop, feeds the adder, swaps in new weights between ticks.

Chunks are executed one action per tick; a new chunk is requested when the current one runs out
(chunk length 1 here: inference inline. The asynchronous inference engine replaces this).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event

import numpy as np

from hal.robot import Robot, RobotError
from hal.safety import SafeRobot
from hal.teleop import Teleop, poll_events
from policies.base import Policy, WeightsMismatch
from robo_async.actor.adder import Adder
from robo_async.actor.inference import ACTOR_MODES, AsyncChunkRunner, InferenceEngine
from robo_async.actor.uplink import Uplink, UplinkConfig
from robo_async.transport.channels import WeightClient
from robo_async.transport.wire import EpisodeStats, Heartbeat, LearnerStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActorConfig:
    actor_id: int
    data_address: str
    weights_address: str
    episode_ticks: int = 50  # truncate episodes after this many ticks
    realtime: bool = False  # pace ticks at the robot's hz; never wait on the learner
    flush_every: int = 32  # transitions per message
    heartbeat_s: float = 1.0
    seed: int = 0
    start_seq: int = 0
    start_episode: int = 0
    first_status_timeout_s: float = 60.0
    max_steps: int | None = None  # stop after this many env steps (benchmarks, tests)
    eval_every: int = 2  # every n-th episode runs the deterministic policy (0: never)
    uplink: UplinkConfig = UplinkConfig()  # acknowledged delivery, journal
    inference: str = "inline"  # inline (chunk per tick on the loop), or one of inference.ACTOR_MODES
    inference_timeout_s: float = 2.0  # an inference running longer is reported; the robot holds
    inference_workers: int = 1  # inferences in flight at once (pipelined when > 1)
    replan: str = "due"  # due: next chunk when the committed actions fall to latency + 1; continuous: always
    drain_s: float = 5.0  # on stop, wait this long for the learner to ack what was sent


class LearnerUnavailable(RuntimeError):
    pass


class Actor:
    """One control loop. `run()` returns when `stop` is set, the learner says it is stopping,
    or `max_steps` is reached."""

    def __init__(self, robot: Robot, policy: Policy, config: ActorConfig, teleops: tuple[Teleop, ...] = ()) -> None:
        self.robot = robot if isinstance(robot, SafeRobot) else SafeRobot(robot)
        self.teleops = teleops  # polled every tick; an e-stop from any of them holds the robot
        self.policy = policy
        self.config = config
        self.env_steps = 0
        self.episodes = config.start_episode
        self.versions_seen: list[int] = []
        self._rng = np.random.default_rng(config.seed)
        self._bad_weights_logged: set[int] = set()
        self.runner: AsyncChunkRunner | None = None
        self.tick = 0  # control ticks since start (the async schedule's clock)
        if config.inference != "inline":
            if config.inference not in ACTOR_MODES:
                raise ValueError(f"actor.inference '{config.inference}' unknown; use inline or one of "
                                 f"{sorted(ACTOR_MODES)}")
            merge, forward = ACTOR_MODES[config.inference]
            spec = self.robot.spec
            engine = InferenceEngine(policy, spec.action_dim, getattr(policy, "horizon", 1),
                                     config.inference_timeout_s, config.inference_workers)
            self.runner = AsyncChunkRunner(engine, spec, merge, forward, replan=config.replan)

    def _swap_weights(self, client: WeightClient) -> None:
        w = client.take_weights()
        if w is None:
            return
        try:
            if w.architecture and w.architecture != self.policy.architecture:
                raise WeightsMismatch(f"weights v{w.version} are for {w.architecture}, "
                                      f"this actor runs {self.policy.architecture}")
            if self.runner is not None:  # the inference thread loads them between two chunks
                self.runner.engine.swap_weights(w.version, w.arrays)
                self.versions_seen.append(w.version)
                return
            self.policy.load_weights(w.version, w.arrays)
            self.versions_seen.append(w.version)
        except WeightsMismatch as e:
            if w.version not in self._bad_weights_logged:
                log.error("actor %d rejected weights, keeping v%d: %s", self.config.actor_id, self.policy.version, e)
                self._bad_weights_logged.add(w.version)

    def _inference_stats(self) -> dict[str, float]:
        if self.runner is None:
            return {}
        e = self.runner.engine
        return {"infer_p50_ms": round(e.latency.percentile(50) * 1000, 2),
                "infer_p95_ms": round(e.latency.percentile(95) * 1000, 2),
                "held_ticks": self.runner.holds, "bad_chunks": e.bad_chunks, "hung": e.hung_reports,
                "stale_dropped": self.runner.schedule.stale_dropped}

    def _is_eval(self) -> bool:
        n = self.config.eval_every
        return n > 0 and self.policy.version >= 0 and self.episodes % n == n - 1

    def _act(self, obs: dict[str, np.ndarray], evaluation: bool) -> np.ndarray:
        if self.policy.version < 0:  # no weights yet: uniform random joint targets
            spec = self.robot.spec
            return self._rng.uniform(spec.low, spec.high).astype(np.float32)
        if hasattr(self.policy, "deterministic"):
            self.policy.deterministic = evaluation
        return self.policy.predict_chunk(obs).actions[0]

    def _wait_for_allowance(self, client: WeightClient, stop: Event) -> bool:
        """In as-fast-as-possible sim mode, pause while the learner is behind (rate limiter).
        Returns False if the run should end."""
        deadline = time.monotonic() + self.config.first_status_timeout_s
        while not stop.is_set():
            st = client.status
            if st is None:
                if time.monotonic() > deadline:
                    raise LearnerUnavailable(
                        f"actor {self.config.actor_id}: no word from the learner at "
                        f"{self.config.weights_address} for {self.config.first_status_timeout_s:.0f} s")
            elif st.stopping:
                return False
            elif st.env_steps < st.allowed_env_steps or self.config.realtime:
                return True
            time.sleep(0.001)
        return False

    def _first_status(self, client: WeightClient, stop: Event) -> LearnerStatus | None:
        deadline = time.monotonic() + self.config.first_status_timeout_s
        while client.status is None and not stop.is_set():
            if time.monotonic() > deadline:
                raise LearnerUnavailable(
                    f"actor {self.config.actor_id}: no word from the learner at "
                    f"{self.config.weights_address} for {self.config.first_status_timeout_s:.0f} s")
            time.sleep(0.005)
        return client.status

    def run(self, stop: Event) -> None:
        cfg = self.config
        client = WeightClient(cfg.weights_address).start()
        self.uplink = Uplink(cfg.actor_id, cfg.data_address, lambda: client.status, cfg.uplink)
        try:
            journal_next = self.uplink.open()
            status = self._first_status(client, stop)
            if status is None:  # stopped before the learner answered
                return
            acked = status.acked_for(cfg.actor_id) or 0
            # Numbering resumes after everything the learner or our own journal already holds.
            start_seq = max(cfg.start_seq, acked, journal_next)
            self.uplink.start(acked)
            adder = Adder(cfg.actor_id, self.uplink, cfg.flush_every, start_seq=start_seq)
            self.robot.connect()
            try:
                self._loop(stop, client, adder)
            finally:
                adder.flush()
                try:
                    self.robot.close()
                except RobotError as e:
                    log.error("actor %d: closing the robot failed: %s", cfg.actor_id, e)
        finally:
            if self.runner is not None:
                self.runner.engine.close()
            self.uplink.close(cfg.drain_s)
            client.close()

    def _loop(self, stop: Event, client: WeightClient, adder: Adder) -> None:
        cfg = self.config
        obs = self.robot.reset(seed=cfg.seed * 100_003 + self.episodes).as_dict()
        if self.runner is not None:  # before the first tick: torch's slow first call, a first latency
            self.runner.engine.warmup(obs)
        ep_return, ep_len, ep_success = 0.0, 0, False
        next_beat = time.monotonic() + cfg.heartbeat_s
        dt = self.robot.spec.dt
        next_tick = time.monotonic()
        while not stop.is_set():
            if cfg.realtime:  # hold the control rate: tick k starts at t0 + k * dt
                next_tick += dt
                delay = next_tick - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    next_tick = time.monotonic()
            if cfg.max_steps is not None and self.env_steps >= cfg.max_steps:
                break
            self._swap_weights(client)  # between ticks, never mid-inference
            if self.teleops:
                poll_events(self.teleops, self.robot)
            if not cfg.realtime and not self._wait_for_allowance(client, stop):
                break
            version = self.policy.version
            if ep_len == 0:
                evaluation = self._is_eval()
            if self.runner is not None:
                if hasattr(self.policy, "deterministic"):
                    self.policy.deterministic = evaluation
                action = self.runner.tick(self.tick, obs)
                version = self.runner.version
            else:
                action = self._act(obs, evaluation)
            self.tick += 1
            applied = self.robot.send_action(action)
            out = self.robot.outcome()
            next_obs = self.robot.get_observation().as_dict()
            ep_len += 1
            truncated = ep_len >= cfg.episode_ticks and not out.terminated
            adder.add(obs, applied, out.reward, next_obs, out.terminated, truncated, version, out.success)
            self.env_steps += 1
            ep_return += out.reward
            ep_success = ep_success or out.success
            obs = next_obs
            if out.terminated or truncated:
                adder.send_episode(EpisodeStats(cfg.actor_id, self.episodes, ep_return, ep_len,
                                                ep_success, version, evaluation))
                self.episodes += 1
                obs = self.robot.reset(seed=cfg.seed * 100_003 + self.episodes).as_dict()
                if self.runner is not None:
                    self.runner.reset()
                ep_return, ep_len, ep_success = 0.0, 0, False
            if time.monotonic() >= next_beat:
                next_beat += cfg.heartbeat_s
                st = self.robot.stats
                adder.send_heartbeat(Heartbeat(cfg.actor_id, self.env_steps, self.policy.version,
                                               {"clipped": st.clipped, "rejected": st.rejected,
                                                "workspace": st.workspace, "estopped": st.estopped,
                                                "unacked": self.uplink.unacked,
                                                "resends": self.uplink.resends, **self._inference_stats()}))
