"""Any LeRobot robot or teleoperator behind `hal`: so100/so101 followers, koch, leader arms,
gamepad, keyboard, and our sim-backed `sim_so101`.

Units: LeRobot arms report `<motor>.pos` in degrees (`use_degrees=True`) and the gripper in
0..100; `hal` works in radians, with the gripper mapped onto its joint range. Errors from the
device (unplugged, not connected) become `RobotError` naming the robot and its port.

    device = make_lerobot_device({"type": "so101_follower", "port": "/dev/ttyACM0", "id": "left"})
    robot = LeRobotRobot(device, joint_low, joint_high, hz=30)     # a hal.Robot
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Mapping

import numpy as np

from hal.robot import Robot, RobotError
from hal.spec import CameraSpec, Observation, Outcome, RobotSpec
from hal.teleop import Teleop, TeleopEvent, TeleopEventKind

# Joint limits (rad) of the SO-100/SO-101 arm family (from our MJCF of the same arm).
log = logging.getLogger(__name__)
SO_ARM_LIMITS = ((-1.92, -1.75, -1.69, -1.66, -2.74, -0.17), (1.92, 1.75, 1.69, 1.66, 2.84, 1.75))


ROBOT_MODULES = ("so_follower", "koch_follower", "omx_follower")  # register their configs with LeRobot
TELEOP_MODULES = ("so_leader", "koch_leader", "gamepad", "keyboard")


def _register(package: str, modules: tuple[str, ...]) -> None:
    import importlib

    import hardware.sim_leader  # noqa: F401  (registers sim_leader with LeRobot)
    import hardware.sim_so101  # noqa: F401  (registers sim_so101 with LeRobot)

    for m in modules:
        try:
            importlib.import_module(f"{package}.{m}")
        except ImportError:  # an optional SDK is missing: that device type is unavailable
            pass


def _choice(registry, what: str, options: Mapping[str, object]) -> tuple[type, dict]:
    """The registered config class for `options["type"]`, and the remaining options."""
    opts = {k: v for k, v in options.items() if v is not None}  # null in a config: the device's default
    kind = str(opts.pop("type"))
    try:
        return registry.get_choice_class(kind), opts
    except KeyError:
        raise RobotError(f"LeRobot has no {what} type '{kind}'; known: {sorted(registry.get_known_choices())}") from None


def make_lerobot_device(options: Mapping[str, object]):
    """A LeRobot robot from a plain dict: `type` plus that robot config's fields (cameras as
    `{name: {type: opencv, index_or_path: 0, width: 640, height: 480, fps: 30}}`)."""
    _register("lerobot.robots", ROBOT_MODULES)
    from lerobot.cameras.configs import CameraConfig
    from lerobot.robots.config import RobotConfig
    from lerobot.robots.utils import make_robot_from_config

    cfg_cls, opts = _choice(RobotConfig, "robot", options)
    kind = str(options["type"])
    cams = opts.pop("cameras", None)
    if cams and kind != "sim_so101":
        opts["cameras"] = {n: CameraConfig.get_choice_class(c.pop("type", "opencv"))(**c) for n, c in dict(cams).items()}
    elif cams:
        opts["cameras"] = list(cams)
    try:
        return make_robot_from_config(cfg_cls(**opts))
    except TypeError as e:
        raise RobotError(f"robot {kind}: bad options {sorted(opts)}: {e}") from None


class _Units:
    """LeRobot `<motor>.pos` values <-> radians (gripper 0..100 <-> its joint range)."""

    def __init__(self, keys: list[str], low: tuple[float, ...], high: tuple[float, ...]) -> None:
        self.keys = keys
        self.scale = np.array([(h - lo) / 100 if k.startswith("gripper") else np.pi / 180
                               for k, lo, h in zip(keys, low, high)], np.float64)
        self.offset = np.array([lo if k.startswith("gripper") else 0.0 for k, lo in zip(keys, low)], np.float64)

    def to_hal(self, values: Mapping[str, float]) -> np.ndarray:
        return (np.array([float(values[k]) for k in self.keys]) * self.scale + self.offset).astype(np.float32)

    def to_lerobot(self, q: np.ndarray) -> dict[str, float]:
        return {k: float(v) for k, v in zip(self.keys, (np.asarray(q, np.float64) - self.offset) / self.scale)}


class LeRobotRobot(Robot):
    """A LeRobot robot `device` as a `hal.Robot` (see the module's docstring): joint limits (rad) from the
    arguments or the device, positions converted between LeRobot's degrees and gripper 0..100 and radians."""

    def __init__(self, device, joint_low: tuple[float, ...] | None = None,
                 joint_high: tuple[float, ...] | None = None, hz: float = 30.0) -> None:
        self.device = device
        keys = [k for k, t in device.action_features.items() if t is float]
        if joint_low is None or joint_high is None:
            limits = getattr(device, "joint_limits_rad", None) or SO_ARM_LIMITS
            joint_low, joint_high = limits
        if len(joint_low) != len(keys):
            raise RobotError(f"{device.name} has {len(keys)} joints {keys}; {len(joint_low)} limits were given")
        self._units = _Units(keys, tuple(joint_low), tuple(joint_high))
        cams = tuple(CameraSpec(k, v[0], v[1]) for k, v in device.observation_features.items()
                     if isinstance(v, tuple) and len(v) == 3 and v[2] == 3)
        self._spec = RobotSpec(name=f"lerobot_{device.name}", joint_names=tuple(k.removesuffix(".pos") for k in keys),
                               joint_low=tuple(joint_low), joint_high=tuple(joint_high), hz=hz, cameras=cams,
                               features=tuple(getattr(device, "feature_spec", ())))
        if callable(getattr(device, "ee_position", None)):  # forward kinematics (rad -> m), where the device has it
            self.ee_position = device.ee_position

    @property
    def spec(self) -> RobotSpec:
        return self._spec

    def _where(self) -> str:
        port = getattr(getattr(self.device, "config", None), "port", None)
        return f"{self.device.name}" + (f" on {port}" if port else "")

    def connect(self) -> None:
        if self.device.is_connected:
            return
        try:
            self.device.connect(calibrate=False)
        except (ConnectionError, OSError, RuntimeError, ValueError) as e:
            raise RobotError(f"{self._where()} cannot connect: {' '.join(str(e).split())}") from None

    def close(self) -> None:
        try:
            if self.device.is_connected:
                self.device.disconnect()
        except (ConnectionError, OSError) as e:
            raise RobotError(f"{self._where()}: disconnect failed: {e}") from None

    def get_observation(self) -> Observation:
        try:
            raw = self.device.get_observation()
        except (ConnectionError, OSError) as e:  # DeviceNotConnectedError is a ConnectionError
            raise RobotError(f"{self._where()}: {e}") from None
        feats = self.device.features() if hasattr(self.device, "features") else {}
        images = {c.name: np.asarray(raw[c.name]) for c in self._spec.cameras}
        return Observation(time.monotonic(), self._units.to_hal(raw), feats, images)

    def send_action(self, action: np.ndarray) -> np.ndarray:
        a = self._spec.check_action(action)
        try:
            sent = self.device.send_action(self._units.to_lerobot(a))
        except (ConnectionError, OSError) as e:
            raise RobotError(f"{self._where()}: {e}") from None
        return self._units.to_hal(sent)

    def reset(self, *, seed: int | None = None) -> Observation:
        if hasattr(self.device, "reset_episode"):  # a simulator can; a real arm stays where it is
            self.device.reset_episode(seed)
        return self.get_observation()

    def outcome(self) -> Outcome:
        return self.device.outcome() if hasattr(self.device, "outcome") else Outcome()


# LeRobot's TeleopEvents (and our `estop`, which LeRobot has no event for: sim_leader's scripted one;
# LeRobot's gamepad and keyboard have no e-stop button)
_EVENT_MAP = {"success": TeleopEventKind.SUCCESS, "failure": TeleopEventKind.FAILURE,
              "terminate_episode": TeleopEventKind.FAILURE,
              "rerecord_episode": TeleopEventKind.RERECORD, "estop": TeleopEventKind.ESTOP}


def make_lerobot_teleop_device(options: Mapping[str, object]):
    """A LeRobot teleoperator from a plain dict: `type` plus its config fields."""
    _register("lerobot.teleoperators", TELEOP_MODULES)
    from lerobot.teleoperators.config import TeleoperatorConfig
    from lerobot.teleoperators.utils import make_teleoperator_from_config

    cfg_cls, opts = _choice(TeleoperatorConfig, "teleoperator", options)
    return make_teleoperator_from_config(cfg_cls(**opts))


class LeRobotTeleop(Teleop):
    """A LeRobot teleoperator: leader arms give joint positions; gamepad/keyboard give events
    (LeRobot's `TeleopEvents`: is_intervention edges become INTERVENTION_ON/OFF); end-effector
    devices (`gamepad`, `keyboard_ee`: `delta_x/y/z`, `gripper`) also give `get_ee()`, which
    `hal.ee_teleop.EndEffectorTeleop` turns into the robot's actions."""

    def __init__(self, device, joint_low: tuple[float, ...] = SO_ARM_LIMITS[0],
                 joint_high: tuple[float, ...] = SO_ARM_LIMITS[1]) -> None:
        self.device = device
        feats = device.action_features
        keys = [k for k, t in feats.items() if t is float and k.endswith(".pos")]
        self._units = _Units(keys, joint_low, joint_high) if keys else None
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
            except (ConnectionError, OSError, RuntimeError) as e:
                raise RobotError(f"teleop {self.name} cannot connect: {' '.join(str(e).split())}") from None
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
        except (ConnectionError, OSError, KeyError, ValueError) as e:  # unplugged, bus error, bad reading
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
            return np.array([float(a["delta_x"]), float(a["delta_y"]), float(a["delta_z"]),
                             float(a.get("gripper", 1.0))], np.float32)
        except (ConnectionError, OSError, RuntimeError, KeyError, ValueError, TypeError) as e:  # pygame.error: unplugged
            raise self._lost(e) from None

    def events(self) -> list[TeleopEvent]:
        if not hasattr(self.device, "get_teleop_events"):
            return []
        if self.gives_ee:  # LeRobot's end-effector devices read their keys/axes in get_action
            self._ee_tick = self._read_ee()
        try:
            polled = self.device.get_teleop_events()
        except (ConnectionError, OSError, RuntimeError) as e:  # a gamepad unplugged raises pygame.error
            raise self._lost(e) from None
        raw = {str(getattr(k, "value", k)): v for k, v in polled.items()}
        if raw.get("rerecord_episode"):  # LeRobot's keyboard sets terminate_episode with it: a re-record
            raw["terminate_episode"] = False
        out = [TeleopEvent(kind) for key, kind in _EVENT_MAP.items() if raw.get(key)]
        now = bool(raw.get("is_intervention", False))
        if now != self._intervening:
            out.append(TeleopEvent(TeleopEventKind.INTERVENTION_ON if now else TeleopEventKind.INTERVENTION_OFF))
            self._intervening = now
        return out

    def close(self) -> None:
        if self.device.is_connected:
            try:
                self.device.disconnect()
            except (ConnectionError, OSError) as e:  # already gone: nothing left to close
                log.warning("teleop %s: disconnect failed: %s", self.name, e)
