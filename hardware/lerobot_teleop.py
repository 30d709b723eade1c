"""Any LeRobot teleoperator behind `hal`: leader arms (joint positions, LeRobot's units to rad),
gamepad and keyboard (events; end-effector deltas for `hal.ee_teleop`), with the e-stop and
"scene reset" bound to keys and buttons LeRobot leaves unused.

    device = make_lerobot_teleop_device({"type": "so101_leader", "port": "/dev/ttyACM1", "id": "l"})
    teleop = LeRobotTeleop(device, kind="so101_leader")            # a hal.Teleop
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from hal.robot import RobotError
from hal.teleop import Teleop, TeleopEvent, TeleopEventKind
from hal.units import LeRobotUnits
from hardware.lerobot_adapter import BUS_ERRORS, SO_ARM_LIMITS, config_choice, register_modules

log = logging.getLogger(__name__)
TELEOP_MODULES = ("so_leader", "koch_leader", "gamepad", "keyboard")  # register their configs with LeRobot


# LeRobot's TeleopEvents (and our `estop`, which LeRobot has no event for: sim_leader's scripted one;
# LeRobot's gamepad and keyboard have no e-stop button)
ESTOP_KEYS = (" ", "e")  # the keyboard's space bar (or e): e-stop; LeRobot's keyboards ignore both
READY_KEYS = ("n",)  # the scene is reset: start the next episode
ESTOP_BUTTON, READY_BUTTON = 2, 4  # pygame buttons: B/circle (LeRobot's gamepad leaves it unused), LB
_EVENT_MAP = {
    "success": TeleopEventKind.SUCCESS,
    "failure": TeleopEventKind.FAILURE,
    "terminate_episode": TeleopEventKind.FAILURE,
    "rerecord_episode": TeleopEventKind.RERECORD,
    "estop": TeleopEventKind.ESTOP,
    "ready": TeleopEventKind.READY,
}


def make_lerobot_teleop_device(options: Mapping[str, object]):
    """A LeRobot teleoperator from a plain dict: `type` plus its config fields."""
    register_modules("lerobot.teleoperators", TELEOP_MODULES)
    from lerobot.teleoperators.config import TeleoperatorConfig
    from lerobot.teleoperators.utils import make_teleoperator_from_config

    cfg_cls, opts = config_choice(TeleoperatorConfig, "teleoperator", options)
    if opts.get("calibration_dir"):
        opts["calibration_dir"] = Path(str(opts["calibration_dir"])).expanduser()
    try:
        return make_teleoperator_from_config(cfg_cls(**opts))
    except TypeError as e:
        raise RobotError(f"teleop {options['type']}: bad options {sorted(opts)}: {e}") from None


class LeRobotTeleop(Teleop):
    """A LeRobot teleoperator: leader arms give joint positions; gamepad/keyboard give events
    (LeRobot's `TeleopEvents`: is_intervention edges become INTERVENTION_ON/OFF); end-effector
    devices (`gamepad`, `keyboard_ee`: `delta_x/y/z`, `gripper`) also give `get_ee()`, which
    `hal.ee_teleop.EndEffectorTeleop` turns into the robot's actions."""

    def __init__(
        self,
        device,
        joint_low: tuple[float, ...] = SO_ARM_LIMITS[0],
        joint_high: tuple[float, ...] = SO_ARM_LIMITS[1],
        kind: str = "",
    ) -> None:
        self.device = device
        self.kind = kind  # the LeRobot type asked for (its config may carry another registered name)
        try:
            feats = device.action_features
        except AttributeError:  # LeRobot 0.6's plain `keyboard` names an arm it does not have: keys only
            feats = {}
        keys = [k for k, t in feats.items() if t is float and k.endswith(".pos")]
        self._units = LeRobotUnits(keys, joint_low, joint_high) if keys else None
        names = feats.get("names") if isinstance(feats.get("names"), dict) else feats
        self.gives_ee = {"delta_x", "delta_y", "delta_z"} <= set(names)
        self._ee_tick: np.ndarray | None = None
        self._intervening = False

    @property
    def name(self) -> str:
        return str(self.device.name)

    def connect(self) -> None:
        if not self.device.is_connected:
            # leader arms take `calibrate`; LeRobot's gamepad's connect() takes no argument
            takes = "calibrate" in inspect.signature(self.device.connect).parameters
            try:
                self.device.connect(calibrate=False) if takes else self.device.connect()
            except (*BUS_ERRORS, RuntimeError) as e:
                raise RobotError(f"teleop {self.name} cannot connect: {' '.join(str(e).split())}") from None
            if takes and getattr(self.device, "bus", None) is not None and not self.device.is_calibrated:
                self.close()  # a leader read through the wrong calibration would steer the follower wrong
                raise RobotError(
                    f"teleop {self.name} is not calibrated (its servos do not match "
                    f"{getattr(self.device, 'calibration_fpath', 'its calibration file')}): run "
                    f"lerobot-calibrate --teleop.type={self.kind or getattr(self.device.config, 'type', self.name)} "
                    f"--teleop.port=... --teleop.id={self.device.id}"
                )
            pad = getattr(self.device, "gamepad", None)  # LeRobot's gamepad logs "no gamepad" and goes on
            if pad is not None and getattr(pad, "running", True) is False:
                self.device.disconnect()
                raise RobotError(f"teleop {self.name} cannot connect: no gamepad found (is it plugged in?)")

    @property
    def action_dim(self) -> int | None:
        return len(self._units.keys) if self._units is not None else None

    def _lost(self, e: Exception) -> RobotError:
        return RobotError(f"teleop {self.name} lost: {type(e).__name__}: {' '.join(str(e).split())}")

    def get_action(self) -> np.ndarray | None:
        if self._units is None:
            return None
        try:
            return self._units.to_hal(self.device.get_action())
        except (*BUS_ERRORS, KeyError, ValueError) as e:  # unplugged, bus error, bad reading
            raise self._lost(e) from None

    def get_ee(self) -> np.ndarray | None:
        """`[dx, dy, dz, grip]` from an end-effector device (grip 0 close, 1 stay, 2 open), or None:
        the reading `events()` took this tick (LeRobot's order: the action, then the events that
        are derived from it), else a fresh one."""
        if not self.gives_ee:
            return None
        if self._ee_tick is not None:
            ee, self._ee_tick = self._ee_tick, None
            return ee
        return self._read_ee()

    def _read_ee(self) -> np.ndarray:
        try:
            a = self.device.get_action()
            return np.array(
                [float(a["delta_x"]), float(a["delta_y"]), float(a["delta_z"]), float(a.get("gripper", 1.0))],
                np.float32,
            )
        except (*BUS_ERRORS, RuntimeError, KeyError, ValueError, TypeError) as e:  # pygame.error: unplugged
            raise self._lost(e) from None

    def events(self) -> list[TeleopEvent]:
        # our keys: a tap (pressed and released since the last tick) is only in the listener's queue,
        # which get_action drains; a held key reaches the queue of "other keys", which LeRobot's
        # events empty: look in both, before each is drained
        ours = self._keys_in(getattr(self.device, "event_queue", None))
        if self.gives_ee:  # LeRobot's end-effector devices read their keys/axes in get_action
            self._ee_tick = self._read_ee()
        ours.update(self._keys_in(getattr(self.device, "misc_keys_queue", None)))
        ours.update(self._pad_buttons())
        try:  # (LeRobot's plain `keyboard` has no events of its own: our keys still count)
            polled = self.device.get_teleop_events() if hasattr(self.device, "get_teleop_events") else {}
        except (*BUS_ERRORS, RuntimeError) as e:  # a gamepad unplugged raises pygame.error
            raise self._lost(e) from None
        raw = {str(getattr(k, "value", k)): v for k, v in polled.items()}
        raw.update(ours)
        if raw.get("rerecord_episode"):  # LeRobot's keyboard sets terminate_episode with it: a re-record
            raw["terminate_episode"] = False
        out = [TeleopEvent(kind) for key, kind in _EVENT_MAP.items() if raw.get(key)]
        now = bool(raw.get("is_intervention", False))
        if now != self._intervening:
            out.append(TeleopEvent(TeleopEventKind.INTERVENTION_ON if now else TeleopEventKind.INTERVENTION_OFF))
            self._intervening = now
        return out

    @staticmethod
    def _keys_in(queue) -> dict[str, bool]:
        """Our keys in one of LeRobot's keyboard queues: the e-stop (space or e) and "scene reset, go
        on" (n). Items are keys, or (key, pressed) as pynput's listener queued them. Read in place
        under the queue's own lock (nothing taken out: the listener thread may be adding to it)."""
        out: dict[str, bool] = {}
        if queue is None:
            return out
        with queue.mutex:
            items = list(queue.queue)
        for item in items:
            key = item[0] if isinstance(item, tuple) else item
            char = getattr(key, "char", key)
            pressed = item[1] if isinstance(item, tuple) else True
            if pressed and (char in ESTOP_KEYS or getattr(key, "name", None) == "space"):
                out["estop"] = True
            elif pressed and char in READY_KEYS:
                out["ready"] = True
        return out

    def _pad_buttons(self) -> dict[str, bool]:
        """The gamepad's e-stop (B) and "scene reset" (LB) buttons, read from its joystick."""
        out: dict[str, bool] = {}
        pad = getattr(getattr(self.device, "gamepad", None), "joystick", None)
        if pad is not None:
            try:
                if pad.get_button(ESTOP_BUTTON):
                    out["estop"] = True
                if pad.get_button(READY_BUTTON):
                    out["ready"] = True
            except Exception as e:  # noqa: BLE001 - pygame.error: unplugged
                raise self._lost(e) from None
        return out

    def close(self) -> None:
        if self.device.is_connected:
            try:
                self.device.disconnect()
            except BUS_ERRORS as e:  # already gone: nothing left to close
                log.warning("teleop %s: disconnect failed: %s", self.name, e)
