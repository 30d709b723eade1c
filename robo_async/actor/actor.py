"""The training actor: the control loop (`loop.py`) wired to a learner. Weights arrive over ZMQ and
are swapped in between ticks; transitions go through the `Adder` to the `Uplink` (acknowledged
delivery, journal); in as-fast-as-possible sim mode the loop waits for the learner's allowance.

    actor = Actor(safe_robot, policy, ActorConfig(actor_id, data_address, weights_address, LoopConfig(...)))
    actor.run(stop)        # until stop, the learner stopping, or loop.max_steps
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from threading import Event as ThreadEvent

import zmq

from hal.robot import RobotError
from hal.safety import SafeRobot
from hal.teleop import Teleop
from policies.base import Policy

from robo_async.actor.adder import Adder
from robo_async.actor.loop import ControlLoop, LoopConfig, LoopResult, TickInfo
from robo_async.actor.uplink import Uplink, UplinkConfig
from robo_async.transport.channels import WeightClient
from robo_async.transport.stats import ActorStats
from robo_async.transport.wire import LearnerStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ActorConfig:
    """One actor: its id, the learner's addresses, the control loop, delivery, keys, a guide or a policy server."""

    actor_id: int
    data_address: str
    weights_address: str
    loop: LoopConfig = LoopConfig()  # the control loop: pacing, episodes, inference mode
    flush_every: int = 32  # transitions per message
    start_seq: int = 0
    first_status_timeout_s: float = 60.0
    uplink: UplinkConfig = UplinkConfig()  # acknowledged delivery, journal
    drain_s: float = 5.0  # on stop, wait this long for the learner to ack what was sent
    keys_dir: str | None = None  # CURVE keys (`robo-async keys`): this actor's pair and the learner's public key
    learner_silent_s: float = 3.0  # no status for this long: the learner is away (logged, counted)
    guide: str | None = None  # JSRL guide policy: "expert" (the task's scripted expert) or a `bc` run directory
    inference_server: str | None = None  # the policy runs on this `robo-async serve` server (actor/remote.py)
    server_image_codec: str = "jpeg"  # how camera frames travel to it: jpeg | png | qoi | raw
    embed: bool = True  # the policy's frozen camera encoder (if any) embeds each batch's frames on the uplink thread


class LearnerUnavailable(RuntimeError):
    """No status from the learner within `first_status_timeout_s` (named: where the actor listened)."""


class Actor:
    """One robot's control loop fed by a learner. `run()` returns when `stop` is set, the learner
    says it is stopping, or `loop.max_steps` is reached."""

    def __init__(self, robot: SafeRobot, policy: Policy, config: ActorConfig, teleops: tuple[Teleop, ...] = (),
                 observer: Callable[[TickInfo], None] | None = None, guide: Policy | None = None) -> None:
        self.guide = guide
        self.robot = robot if isinstance(robot, SafeRobot) else SafeRobot(robot)
        self.teleops = teleops
        self.observer = observer  # sees every tick (benchmarks)
        self.policy = policy
        self.config = config
        self.loop: ControlLoop | None = None
        self.client: WeightClient | None = None  # statuses (and weights) from the learner, while running
        self.result: LoopResult | None = None
        self.gate_waits = 0  # ticks that waited for the learner's allowance
        self._gate_status: LearnerStatus | None = None
        self._gate_limit = 0.0
        self.ticks_learner_away = 0  # ticks run (real time) while the learner was silent
        self.learner_outages = 0
        self._away_since: float | None = None

    @property
    def env_steps(self) -> int:
        return self.loop.env_steps if self.loop is not None else 0

    def _allowance(self, client: WeightClient, adder: Adder, stop: Event | ThreadEvent) -> bool:
        """As-fast-as-possible mode: wait while this actor has produced its share of the learner's
        allowance. What it produced counts (sent but not yet committed too), not what the learner
        has received, so data in flight cannot overshoot the update-to-data ratio. False: end."""
        st = client.status
        if st is not None and st is self._gate_status and adder.seq < self._gate_limit:
            return True  # the common case, once per tick: no new status, still within the share
        deadline = time.monotonic() + self.config.first_status_timeout_s
        waited = False
        while not stop.is_set():
            st = client.status
            if st is None:
                if time.monotonic() > deadline:
                    raise LearnerUnavailable(
                        f"actor {self.config.actor_id}: no word from the learner at "
                        f"{self.config.weights_address} for {self.config.first_status_timeout_s:.0f} s")
            elif st.stopping:
                return False
            elif self._may_produce(st, adder.seq):
                self.gate_waits += waited
                self._gate_status = st
                self._gate_limit = self._produce_limit(st)
                return True
            waited = True
            self._watch_learner(client, self.uplink.unacked)
            time.sleep(0.001)
        return False

    def _produce_limit(self, st: LearnerStatus) -> float:
        """The seq this actor may produce up to under `st`: its share of the headroom (allowed -
        committed), split evenly among the actors the learner hears from, counted from what the
        learner has committed of ours (so what is produced but in flight counts against it)."""
        share = (st.allowed_env_steps - st.env_steps) / max(st.actors, 1)
        return (st.acked_for(self.config.actor_id) or 0) + share

    def _may_produce(self, st: LearnerStatus, produced: int) -> bool:
        return produced < self._produce_limit(st)

    def _watch_learner(self, client: WeightClient, pending: int) -> None:
        """Notice a silent learner (crashed, restarting, network down) and its return, once each."""
        silent = client.silent_s()
        if silent > self.config.learner_silent_s:
            if self._away_since is None:
                self._away_since = time.monotonic() - silent
                self.learner_outages += 1
                log.warning("actor %d: no word from the learner at %s for %.0f s; %s, keeping %d unacked "
                            "transitions to resend when it is back", self.config.actor_id, self.config.weights_address,
                            silent, "executing" if self.config.loop.realtime else "paused", pending)
        elif self._away_since is not None:
            log.warning("actor %d: the learner is back after %.1f s", self.config.actor_id,
                        time.monotonic() - self._away_since)
            self._away_since = None

    def _stopping_gate(self, client: WeightClient, uplink: Uplink) -> Callable[[], bool]:
        """Real time: never wait on the learner (the robot keeps executing while it is away;
        data waits in the uplink); end when it says it is stopping."""
        def gate() -> bool:
            st = client.status
            self._watch_learner(client, uplink.unacked)
            if self._away_since is not None:
                self.ticks_learner_away += 1
            return st is None or not st.stopping
        return gate

    def _first_status(self, client: WeightClient, stop: Event | ThreadEvent) -> LearnerStatus | None:
        deadline = time.monotonic() + self.config.first_status_timeout_s
        while client.status is None and not stop.is_set():
            if time.monotonic() > deadline:
                raise LearnerUnavailable(
                    f"actor {self.config.actor_id}: no word from the learner at "
                    f"{self.config.weights_address} for {self.config.first_status_timeout_s:.0f} s")
            time.sleep(0.005)
        return client.status

    def run(self, stop: Event | ThreadEvent) -> LoopResult | None:
        cfg = self.config
        secure = None
        if cfg.keys_dir is not None:
            from functools import partial

            from robo_async.transport.curve import secure_client

            secure = partial(secure_client, keys_dir=cfg.keys_dir, actor_id=cfg.actor_id)
            probe = zmq.Context.instance().socket(zmq.PUSH)
            try:  # the key files are read here, so a missing one is named before anything starts
                secure(probe)
            finally:
                probe.close(linger=0)
        # a policy on a policy server gets its weights there: this actor subscribes to statuses only
        remote = bool(getattr(self.policy, "remote", False))
        client = WeightClient(cfg.weights_address, secure=secure, weights=not remote).start()
        self.client = client
        encoder = self.policy.frozen_encoder() if cfg.embed else None
        self.uplink = Uplink(cfg.actor_id, cfg.data_address, lambda: client.status, cfg.uplink, secure=secure,
                             encoder=encoder)
        try:
            journal_next = self.uplink.open()
            status = self._first_status(client, stop)
            if status is None:  # stopped before the learner answered
                return None
            acked = status.acked_for(cfg.actor_id) or 0
            # Numbering resumes after everything the learner or our own journal already holds.
            start_seq = max(cfg.start_seq, acked, journal_next)
            self.uplink.start(acked)
            adder = Adder(cfg.actor_id, self.uplink, cfg.flush_every, start_seq=start_seq)
            uplink = self.uplink
            self.loop = ControlLoop(
                self.robot, self.policy, cfg.loop, sink=adder, weights=client.take_weights, teleops=self.teleops, observer=self.observer,
                gate=self._stopping_gate(client, uplink) if cfg.loop.realtime else lambda: self._allowance(client, adder, stop),
                stats=lambda: ActorStats(unacked=uplink.unacked, resends=uplink.resends, gate_waits=self.gate_waits,
                                         learner_outages=self.learner_outages,
                                         ticks_learner_away=self.ticks_learner_away,
                                         weights_refused=client.weights_refused),
                guide=self.guide)
            self.robot.connect()
            try:
                self.result = self.loop.run(stop)
            finally:
                try:
                    self.robot.close()
                except RobotError as e:
                    log.error("actor %d: closing the robot failed: %s", cfg.actor_id, e)
            return self.result
        finally:
            self.uplink.close(cfg.drain_s)
            client.close()
