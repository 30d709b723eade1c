"""Who is in control, decided every tick: `Operators` turns the teleops' events into takeovers,
releases and episode labels for the control loop, and never waits on inference.

    ops = Operators(teleops, safe_robot)
    labels = ops.poll(obs, evaluation)   # each tick: e-stop latched at once, takeover/release, labels
    if ops.active is not None:
        action = ops.action()            # the operator's command; None: hold this tick (device lost)

A teleop that raises `RobotError` (unplugged, bus error) is dropped from the session: if it had
control, the robot holds for that tick and control returns to the policy. Conflicting events in one
tick: the e-stop wins (`hal.teleop.poll_events`); of several labels the first one counts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from hal.robot import RobotError
from hal.safety import SafeRobot
from hal.teleop import Teleop, TeleopEventKind, poll_events
from robo_async.transport.stats import ActorStats

log = logging.getLogger(__name__)
LABELS = (TeleopEventKind.SUCCESS, TeleopEventKind.FAILURE, TeleopEventKind.RERECORD)


class TeleopMismatch(ValueError):
    """A teleop whose actions do not fit the robot (caught before the run starts)."""


def check_teleops(teleops: tuple[Teleop, ...], action_dim: int) -> None:
    for t in teleops:
        if t.action_dim is not None and t.action_dim != action_dim:
            raise TeleopMismatch(f"teleop {t.name} gives {t.action_dim} joint targets, the robot takes {action_dim}")


class Operators:
    """The session's teleops and who of them drives (`active`; None: the policy), polled once per
    tick by the control loop (see the module's docstring). `first` / `released` mark this tick's
    takeover or hand-back; the counters (`takeovers`, `operator_ticks`, `lost`, `labels`) go into
    the heartbeat through `stats()`. `always=True`: a teleop session, the first driving teleop
    has control from the start and keeps it."""

    def __init__(self, teleops: tuple[Teleop, ...], robot: SafeRobot, always: bool = False) -> None:
        check_teleops(teleops, robot.spec.action_dim)
        self.teleops = list(teleops)
        self.robot = robot
        self.active: Teleop | None = None  # the teleop in control (None: the policy)
        self._asked_by: Teleop | None = None  # the teleop whose intervention event started the takeover
        self.first = False  # this tick is the first of a takeover
        # always: a teleop session (`robo-async teleop`): the first teleop that gives actions drives
        # from the start and never hands back (intervention events are ignored)
        self.always = always
        if always:
            drivers = [t for t in teleops if t.action_dim is not None]
            if not drivers:
                raise TeleopMismatch(
                    f"a teleop session needs a teleop that gives joint targets (a leader arm); "
                    f"{[t.name for t in teleops]} give events only"
                )
            self.active, self.first, self.takeovers = drivers[0], True, 1
        self.released = False  # control came back to the policy this tick
        self.operator_ticks = 0  # ticks an operator drove, in total
        self.takeovers = int(always)
        self.lost = 0  # teleops dropped from the session
        self.lost_driver = False  # the driving teleop was lost in this tick's poll (the robot holds this tick)
        self.labels = {k.value: 0 for k in LABELS}

    def _drop(self, teleop: Teleop, error: Exception) -> None:
        log.error(
            "%s; it leaves the session%s",
            error,
            ": the robot holds this tick and control returns to the policy" if teleop is self.active else "",
        )
        self.lost += 1
        if teleop in self.teleops:
            self.teleops.remove(teleop)
        if teleop is self.active:
            self.active, self.released, self.lost_driver = None, True, True
        try:
            teleop.close()
        except Exception as e:  # noqa: BLE001 - already broken; closing is best effort
            log.warning("teleop %s: close failed: %s", teleop.name, e)

    def poll(self, obs: Mapping[str, np.ndarray], evaluation: bool) -> TeleopEventKind | None:
        """Events of this tick: latches an e-stop, takes over or releases, and returns the label
        that ends the episode (success, failure or re-record), if any."""
        self.first = self.always and self.operator_ticks == 0 and self.active is not None
        self.released = self.lost_driver = False
        for t in list(self.teleops):
            try:
                t.observe(obs, evaluation)
            except RobotError as e:
                self._drop(t, e)
        events = poll_events(self.teleops, self.robot, on_lost=self._drop)
        label = None
        for t, e in events:
            if self.always and e.kind in (TeleopEventKind.INTERVENTION_ON, TeleopEventKind.INTERVENTION_OFF):
                continue
            if e.kind is TeleopEventKind.INTERVENTION_ON and self.active is None:
                # a device with buttons only (gamepad, keyboard) hands control to the session's
                # leader arm (`teleop.events_from`); one that gives joint targets drives itself
                driver = (
                    t if t.action_dim is not None else next((d for d in self.teleops if d.action_dim is not None), None)
                )
                if driver is None:
                    log.warning(
                        "teleop %s asked to take over but no teleop here gives joint targets; "
                        "pair it with a leader arm",
                        t.name,
                    )
                    continue
                self.active, self.first, self._asked_by = driver, True, t
                self.takeovers += 1
            elif (
                e.kind is TeleopEventKind.INTERVENTION_OFF
                and self.active is not None
                and t in (self.active, self._asked_by)
            ):
                self.active, self.released = None, True
            elif e.kind in LABELS:
                if label is None:
                    label = e.kind
                    self.labels[e.kind.value] += 1
                else:
                    log.warning(
                        "teleop %s: %s in the same tick as %s; the first counts", t.name, e.kind.value, label.value
                    )
        return label

    def action(self) -> np.ndarray | None:
        """The operator's command this tick; None when its device was lost (the robot holds)."""
        assert self.active is not None
        t = self.active
        try:
            a = t.get_action()
        except RobotError as e:
            self._drop(t, e)
            return None
        if a is None or np.shape(a) != (self.robot.spec.action_dim,) or not np.all(np.isfinite(a)):
            self._drop(t, RobotError(f"teleop {t.name} gave no usable action ({None if a is None else np.shape(a)})"))
            return None
        self.operator_ticks += 1
        return np.asarray(a, np.float32)

    def stats(self) -> ActorStats:
        """The heartbeat's operator figures: who drives now, ticks driven, takeovers, lost teleops, labels."""
        return ActorStats(
            operator=self.active is not None,
            operator_ticks=self.operator_ticks,
            takeovers=self.takeovers,
            teleops_lost=self.lost,
            label_success=self.labels[TeleopEventKind.SUCCESS.value],
            label_failure=self.labels[TeleopEventKind.FAILURE.value],
            label_rerecord=self.labels[TeleopEventKind.RERECORD.value],
        )
