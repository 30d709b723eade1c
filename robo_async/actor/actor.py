"""The training actor: the control loop (`loop.py`) wired to a learner. Weights arrive over ZMQ and
are swapped in between ticks; transitions go through the `Adder` to the `Uplink` (acknowledged
delivery, journal); in as-fast-as-possible sim mode the loop waits for the learner's allowance.

    actor = Actor(safe_robot, policy, ActorConfig(actor_id, data_address, weights_address, LoopConfig(...),
                                                  ActorOptions(flush_every=32)))
    actor.run(stop)        # until stop, the learner stopping, or loop.max_steps

A vectorized actor (`actor.envs=N`, simulators only) drives N robots in one loop with one batched
policy call per tick: `Actor([robot_0, ..., robot_N-1], ...)`. Each robot's transitions are their
own stream (episodes and windows never mix), under the id `lane_actor_id(actor_id, j)` with their
own `Adder`, `Uplink` and journal; robot 0's id is the actor's, whose heartbeats carry the actor's
figures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from multiprocessing.synchronize import Event
from threading import Event as ThreadEvent

import zmq

from hal.robot import RobotError
from hal.safety import SafeRobot
from hal.teleop import Teleop
from policies.base import Policy
from robo_async.actor.adder import Adder
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig, LoopResult, TickInfo
from robo_async.actor.options import MAX_ENVS, ActorOptions, UplinkIn
from robo_async.actor.uplink import Uplink, UplinkThread
from robo_async.actor.uplink_config import UplinkConfig
from robo_async.transport.channels import WeightClient
from robo_async.transport.curve import LANE_STRIDE
from robo_async.transport.stats import ActorStats
from robo_async.transport.wire import LearnerStatus

log = logging.getLogger(__name__)


def lane_actor_id(actor_id: int, lane: int) -> int:
    """The stream id of a vectorized actor's robot `lane` (robot 0: the actor's own id)."""
    return actor_id + lane * LANE_STRIDE


@dataclass(frozen=True)
class ActorConfig:
    """One actor: its id, the learner's addresses, the `actor:` section as configured (`options`),
    and what is derived for this actor: its control loop, delivery, keys and where its stream
    resumes. Training actors get it from `from_options`."""

    actor_id: int
    data_address: str
    weights_address: str
    loop: LoopConfig = LoopConfig()  # the control loop: pacing, episodes, inference mode (resolved)
    # the `actor:` section: flush_every, envs, uplink (thread|process), embed, guide, inference_server, ...
    options: ActorOptions = ActorOptions()
    start_seq: int = 0  # the stream's next seq (a resumed run: the learner's high-water mark)
    first_status_timeout_s: float = 60.0
    delivery: UplinkConfig = UplinkConfig()  # acknowledged delivery: journal, RAM budget, resends
    drain_s: float = 5.0  # on stop, wait this long for the learner to ack what was sent
    keys_dir: str | None = None  # CURVE keys (`robo-async keys`): this actor's pair and the learner's public key

    @classmethod
    def from_options(
        cls,
        options: ActorOptions,
        *,
        actor_id: int,
        loop: LoopConfig,
        delivery: UplinkConfig,
        start_seq: int = 0,
        keys_dir: str | None = None,
    ) -> ActorConfig:
        """A training actor (its addresses are filled in when the learner has bound): `options` as
        configured (an empty `guide` or `inference_server` as none), with its loop and delivery
        (`LoopConfig.from_options`, `UplinkConfig.from_options`). A ValueError names the key of
        options that cannot run together."""
        server = options.inference_server or None
        if server is not None and not server.startswith(("tcp://", "ipc://")):
            raise ValueError(f"actor.inference_server must be a ZMQ address like tcp://host:5560, not {server!r}")
        if server is not None and options.guide:
            raise ValueError("actor.guide (JSRL) runs on the control thread; it cannot run with actor.inference_server")
        options = replace(options, guide=options.guide or None, inference_server=server)
        return cls(actor_id, "", "", loop, options, start_seq=start_seq, delivery=delivery, keys_dir=keys_dir)


class LearnerUnavailable(RuntimeError):
    """No status from the learner within `first_status_timeout_s` (named: where the actor listened)."""


class Actor:
    """One robot's control loop fed by a learner. `run()` returns when `stop` is set, the learner
    says it is stopping, or `loop.max_steps` is reached."""

    def __init__(
        self,
        robot: SafeRobot | Sequence[SafeRobot],
        policy: Policy,
        config: ActorConfig,
        teleops: tuple[Teleop, ...] = (),
        observer: Callable[[TickInfo], None] | None = None,
        guide: Policy | None = None,
    ) -> None:
        self.guide = guide
        robots = list(robot) if isinstance(robot, Sequence) else [robot]
        if not 1 <= len(robots) <= MAX_ENVS:
            raise ValueError(f"an actor drives 1 to {MAX_ENVS} robots, not {len(robots)}")
        if config.actor_id >= LANE_STRIDE and len(robots) > 1:
            raise ValueError(f"a vectorized actor's id must be below {LANE_STRIDE}, not {config.actor_id}")
        self.robots = [r if isinstance(r, SafeRobot) else SafeRobot(r) for r in robots]
        self.robot = self.robots[0]
        self.teleops = teleops
        self.observer = observer  # sees every tick (benchmarks)
        self.policy = policy
        self.config = config
        self.loop: ControlLoop | None = None
        self.client: WeightClient | None = None  # statuses (and weights) from the learner, while running
        self.result: LoopResult | None = None
        self.gate_waits = 0  # ticks that waited for the learner's allowance
        self._gate_status: LearnerStatus | None = None
        self._gate_limit: dict[int, float] = {}
        self.uplinks: list[Uplink] = []
        self.transport = None
        self.ticks_learner_away = 0  # ticks run (real time) while the learner was silent
        self.learner_outages = 0
        self._away_since: float | None = None

    @property
    def env_steps(self) -> int:
        return self.loop.env_steps if self.loop is not None else 0

    def _allowance(self, client: WeightClient, adders: Sequence[Adder], stop: Event | ThreadEvent) -> bool:
        """As-fast-as-possible mode: wait while this actor has produced its share of the learner's
        allowance. What it produced counts (sent but not yet committed too), not what the learner
        has received, so data in flight cannot overshoot the update-to-data ratio. False: end.
        A vectorized actor's robots each count as one actor of the learner's (their own streams):
        it waits while any of them has produced its share."""
        st = client.status
        if (
            st is not None
            and st is self._gate_status
            and all(a.seq < self._gate_limit.get(a.actor_id, 0) for a in adders)
        ):
            return True  # the common case, once per tick: no new status, still within the share
        deadline = time.monotonic() + self.config.first_status_timeout_s
        waited = False
        while not stop.is_set():
            st = client.status
            if st is None:
                if time.monotonic() > deadline:
                    raise LearnerUnavailable(
                        f"actor {self.config.actor_id}: no word from the learner at "
                        f"{self.config.weights_address} for {self.config.first_status_timeout_s:.0f} s"
                    )
            elif st.stopping:
                return False
            elif all(a.seq < self._produce_limit(st, a.actor_id) for a in adders):
                self.gate_waits += waited
                self._gate_status = st
                self._gate_limit = {a.actor_id: self._produce_limit(st, a.actor_id) for a in adders}
                return True
            waited = True
            self._watch_learner(client, sum(u.unacked for u in self.uplinks))
            time.sleep(0.001)
        return False

    def _produce_limit(self, st: LearnerStatus, actor_id: int) -> float:
        """The seq stream `actor_id` may produce up to under `st`: its share of the headroom
        (allowed - committed), split evenly among the streams the learner hears from, counted from
        what the learner has committed of it (so what is produced but in flight counts against it)."""
        share = (st.allowed_env_steps - st.env_steps) / max(st.actors, 1)
        return (st.acked_for(actor_id) or 0) + share

    def _watch_learner(self, client: WeightClient, pending: int) -> None:
        """Notice a silent learner (crashed, restarting, network down) and its return, once each."""
        silent = client.silent_s()
        if silent > self.config.options.learner_silent_s:
            if self._away_since is None:
                self._away_since = time.monotonic() - silent
                self.learner_outages += 1
                log.warning(
                    "actor %d: no word from the learner at %s for %.0f s; %s, keeping %d unacked "
                    "transitions to resend when it is back",
                    self.config.actor_id,
                    self.config.weights_address,
                    silent,
                    "executing" if self.config.loop.realtime else "paused",
                    pending,
                )
        elif self._away_since is not None:
            log.warning(
                "actor %d: the learner is back after %.1f s", self.config.actor_id, time.monotonic() - self._away_since
            )
            self._away_since = None

    def _lane_uplink(self, lane: int) -> UplinkConfig:
        """Robot `lane`'s uplink: the actor's, with its own journal directory beside robot 0's."""
        u = self.config.delivery
        if lane == 0 or u.journal_dir is None:
            return u
        from pathlib import Path

        return replace(u, journal_dir=str(Path(u.journal_dir).with_name(f"journal-lane{lane}")))

    def _stopping_gate(self, client: WeightClient) -> Callable[[], bool]:
        """Real time: never wait on the learner (the robot keeps executing while it is away;
        data waits in the uplink); end when it says it is stopping."""

        def gate() -> bool:
            st = client.status
            self._watch_learner(client, self.uplink.unacked)
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
                    f"{self.config.weights_address} for {self.config.first_status_timeout_s:.0f} s"
                )
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
        encoder = self.policy.frozen_encoder() if cfg.options.embed else None
        ids = [lane_actor_id(cfg.actor_id, j) for j in range(len(self.robots))]
        group = None
        if cfg.options.uplink == UplinkIn.process and encoder is not None:
            log.info(
                "actor %d: the policy's frozen encoder embeds frames on the uplink thread: the uplink stays "
                "in this process (actor.uplink=thread)",
                cfg.actor_id,
            )
        elif cfg.options.uplink == UplinkIn.process:
            from robo_async.actor.uplink_process import ProcessUplinks

            group = ProcessUplinks(
                cfg.actor_id,
                ids,
                [self._lane_uplink(j) for j in range(len(ids))],
                cfg.data_address,
                cfg.weights_address,
                cfg.keys_dir,
            )
        self.transport = group  # the transport process's proxy (actor.uplink=process), else None
        # one stream per robot: its own uplink and journal (robot 0's where a one-robot actor keeps it)
        self.uplinks = (
            group.lanes
            if group is not None
            else [  # type: ignore[assignment]
                Uplink(i, cfg.data_address, lambda: client.status, self._lane_uplink(j), secure=secure, encoder=encoder)
                for j, i in enumerate(ids)
            ]
        )
        self.uplink = self.uplinks[0]
        connected: list[SafeRobot] = []
        try:
            journal_next = group.open() if group is not None else [u.open() for u in self.uplinks]
            status = self._first_status(client, stop)
            if status is None:  # stopped before the learner answered
                return None
            adders = []
            shared = UplinkThread(f"uplink-{cfg.actor_id}")  # one thread for all of this actor's streams
            for j, (i, u) in enumerate(zip(ids, self.uplinks, strict=False)):
                acked = status.acked_for(i) or 0
                # Numbering resumes after everything the learner or our own journal already holds.
                start_seq = max(cfg.start_seq if j == 0 else 0, acked, journal_next[j])
                if group is None:
                    u.start(acked, thread=shared)
                adders.append(Adder(i, u, cfg.options.flush_every, start_seq=start_seq))
            if group is not None:
                group.start([status.acked_for(i) or 0 for i in ids])
            uplinks = self.uplinks
            self.loop = ControlLoop(
                self.robots,
                self.policy,
                cfg.loop,
                sink=adders,
                weights=client.take_weights,
                teleops=self.teleops,
                observer=self.observer,
                gate=self._stopping_gate(client)
                if cfg.loop.realtime
                else lambda: self._allowance(client, adders, stop),
                stats=lambda: ActorStats(
                    unacked=sum(u.unacked for u in uplinks),
                    resends=sum(u.resends for u in uplinks),
                    gate_waits=self.gate_waits,
                    learner_outages=self.learner_outages,
                    ticks_learner_away=self.ticks_learner_away,
                    weights_refused=client.weights_refused,
                ),
                guide=self.guide,
            )
            for r in self.robots:
                r.connect()
                connected.append(r)
            self.result = self.loop.run(stop)
            return self.result
        finally:
            for r in connected:
                try:
                    r.close()
                except RobotError as e:
                    log.error("actor %d: closing the robot failed: %s", cfg.actor_id, e)
            if group is not None:
                group.close(cfg.drain_s)
            else:
                for u in self.uplinks:
                    u.close(cfg.drain_s)
            client.close()
