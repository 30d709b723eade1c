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
import termios
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from hal.robot import Robot, RobotError, RobotFault
from hal.spec import CameraSpec, Observation, Outcome, RobotSpec
from hal.teleop import Teleop, TeleopEvent, TeleopEventKind
from hal.units import LeRobotUnits

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

    import importlib

    for cams_module in ("opencv", "zmq"):  # register LeRobot's camera config types
        try:
            importlib.import_module(f"lerobot.cameras.{cams_module}")
        except ImportError:
            pass
    cfg_cls, opts = _choice(RobotConfig, "robot", options)
    kind = str(options["type"])
    cams = opts.pop("cameras", None)
    if cams and kind != "sim_so101":
        opts["cameras"] = {n: CameraConfig.get_choice_class(c.get("type", "opencv"))(
            **{k: v for k, v in dict(c).items() if k != "type"}) for n, c in dict(cams).items()}  # the caller's kept
    elif cams:
        opts["cameras"] = list(cams)
    if opts.get("calibration_dir"):
        opts["calibration_dir"] = Path(str(opts["calibration_dir"])).expanduser()
    cap = opts.get("max_relative_target")
    if isinstance(cap, int | float) and not isinstance(cap, bool):  # LeRobot takes a float only (an int from
        opts["max_relative_target"] = float(cap)  # a YAML `15` raised TypeError on the first send_action)
    elif isinstance(cap, Mapping):
        opts["max_relative_target"] = {k: float(v) for k, v in cap.items()}
    try:
        return make_robot_from_config(cfg_cls(**opts))
    except (TypeError, ValueError) as e:
        raise RobotError(f"robot {kind}: bad options {sorted(opts)}: {e}") from None


# what a device's I/O raises when it is gone: LeRobot's DeviceNotConnectedError (a ConnectionError),
# pyserial's SerialException (an OSError), and termios.error, which is neither: a pulled USB cable
# makes pyserial's flush() raise it (seen on the twin: an unplugged port ended the run)
BUS_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, OSError, termios.error)
SO_ARMS = ("so100_follower", "so101_follower", "so_follower", "sim_so101")  # the arm our MJCF models
HEALTH_REGISTERS = ("Status", "Present_Temperature")
STATUS_BITS = {0: "input voltage out of range", 2: "overheating", 3: "overcurrent", 5: "overload"}


def set_bus_timeout(device, floor_ms: float | None) -> None:  # noqa: ANN001 - a LeRobot robot or teleoperator
    """Let the device's serial bus wait at least `floor_ms` for a servo's answer. A servo answers
    within microseconds and LeRobot's SDK waits ~50 ms; the twin answers from a process that a
    loaded machine may not schedule that soon, so tests and benchmarks on it give a floor."""
    port = getattr(getattr(device, "bus", None), "port_handler", None)
    if floor_ms is None or port is None:
        return
    set_packet, set_millis = port.setPacketTimeout, port.setPacketTimeoutMillis

    def patient(packet_length: int) -> None:
        set_packet(packet_length)
        port.packet_timeout = max(port.packet_timeout, float(floor_ms))

    def patient_ms(msec: float) -> None:
        set_millis(max(float(msec), float(floor_ms)))

    port.setPacketTimeout, port.setPacketTimeoutMillis = patient, patient_ms


class ArmKinematics:
    """Kinematics of the SO-100/SO-101 from our MJCF of the arm (`sim/assets/so101_reach.xml`, its
    `ee` site): called, forward kinematics (joint positions, rad -> the end effector, m), for the
    workspace box; `jacobian`, MuJoCo's analytic Jacobian, for end-effector teleop's inverse
    kinematics on a real arm. The model loads on first use (constructing does no I/O)."""

    def __init__(self) -> None:
        self._model = self._data = None

    def _loaded(self):  # noqa: ANN202 - (mujoco.MjModel, a scratch mujoco.MjData)
        if self._model is None:
            import mujoco

            import sim

            self._model = mujoco.MjModel.from_xml_path(str(Path(sim.__file__).parent / "assets" / "so101_reach.xml"))
            self._data = mujoco.MjData(self._model)
        return self._model, self._data

    def __call__(self, q: np.ndarray) -> np.ndarray:
        from sim.sim_robot import ee_fk

        return ee_fk(*self._loaded(), np.asarray(q, np.float64)[:6])

    def jacobian(self, q: np.ndarray) -> np.ndarray:
        """d(end effector, m)/d(joint, rad) at `q` (rad): `[3, n]` for the first n = min(len(q), 6)
        joints (the gripper's column is zero: the `ee` site is on the hand)."""
        from sim.sim_robot import ee_jacobian

        return ee_jacobian(*self._loaded(), np.asarray(q, np.float64)[:6])


class LeRobotRobot(Robot):
    """A LeRobot robot `device` as a `hal.Robot` (see the module's docstring): joint limits (rad) from the
    arguments or the device, positions converted between LeRobot's degrees and gripper 0..100 and radians.
    `limits`: the safety layer's motion limits for this arm (`max_step_rad`, `max_velocity_rad_s`,
    `max_accel_rad_s2`), into its spec. A device with a Feetech/Dynamixel bus is checked every
    `health_every` ticks: a servo reporting overload or overheating raises `RobotFault` naming it."""

    def __init__(self, device, joint_low: tuple[float, ...] | None = None,
                 joint_high: tuple[float, ...] | None = None, hz: float = 30.0,
                 limits: Mapping[str, object] | None = None, kind: str = "", health_every: int = 10,
                 camera_wait_s: float = 30.0) -> None:
        self.device = device
        keys = [k for k, t in device.action_features.items() if t is float]
        if joint_low is None or joint_high is None:
            limits_rad = getattr(device, "joint_limits_rad", None) or SO_ARM_LIMITS
            joint_low, joint_high = limits_rad
        if len(joint_low) != len(keys):
            raise RobotError(f"{device.name} has {len(keys)} joints {keys}; {len(joint_low)} limits were given")
        self._units = LeRobotUnits(keys, tuple(joint_low), tuple(joint_high))
        cams = tuple(CameraSpec(k, v[0], v[1]) for k, v in device.observation_features.items()
                     if isinstance(v, tuple) and len(v) == 3 and v[2] == 3)
        motion = {k: (tuple(v) if isinstance(v, list | tuple) else float(v)) for k, v in dict(limits or {}).items()}
        unknown = set(motion) - {"max_step_rad", "max_velocity_rad_s", "max_accel_rad_s2"}
        if unknown:
            raise RobotError(f"robot {device.name}: unknown limits {sorted(unknown)}; known: max_step_rad, "
                             "max_velocity_rad_s, max_accel_rad_s2")
        self._spec = RobotSpec(name=f"lerobot_{device.name}", joint_names=tuple(k.removesuffix(".pos") for k in keys),
                               joint_low=tuple(joint_low), joint_high=tuple(joint_high), hz=hz, cameras=cams,
                               features=tuple(getattr(device, "feature_spec", ())), **motion)  # type: ignore[arg-type]
        if callable(getattr(device, "ee_position", None)):  # forward kinematics (rad -> m), where the device has it
            self.ee_position = device.ee_position
        elif kind in SO_ARMS and len(keys) == 6:
            self.ee_position = ArmKinematics()
        self.health_every = health_every
        self.kind = kind  # the LeRobot type asked for (so101_follower; LeRobot's config may name it so100_follower)
        self._ticks = 0
        self.camera_wait_s = camera_wait_s
        self.camera_stalls = 0  # observations made without fresh camera frames
        self._camera_stall: str | None = None  # why the cameras stopped, until they deliver again
        self._last_images: dict[str, np.ndarray] = {}

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
            calibrated = self.device.is_calibrated
        except (*BUS_ERRORS, RuntimeError, ValueError) as e:
            raise RobotError(f"{self._where()} cannot connect: {' '.join(str(e).split())}") from None
        if not calibrated:  # LeRobot goes on with calibrate=False; positions would be wrong: refuse
            where = getattr(self.device, "calibration_fpath", "its calibration file")
            self.close()
            raise RobotError(f"{self._where()} is not calibrated (its servos do not match {where}): run "
                             f"lerobot-calibrate --robot.type={self.kind or getattr(self.device.config, 'type', self.device.name)} "
                             f"--robot.port=... --robot.id={self.device.id}")
        self._ticks = 0

    def _bus(self):  # noqa: ANN202 - LeRobot's motors bus, where the device has one
        return getattr(self.device, "bus", None)

    def disable_torque(self) -> None:
        """Torque off on every servo (LeRobot's bus), so the arm goes limp; a bus already gone is
        logged (there is nothing left to turn off)."""
        bus = self._bus()
        if bus is None or not self.device.is_connected:
            return
        try:
            bus.disable_torque(num_retry=2)
        except (*BUS_ERRORS, RuntimeError) as e:
            log.error("%s: torque off failed: %s", self._where(), e)

    def check_health(self) -> None:
        """Read each servo's `Status` and temperature; raise `RobotFault` naming the servo and the
        fault when one reports overload, overheating, overcurrent or a voltage out of range."""
        bus = self._bus()
        if bus is None or not hasattr(bus, "sync_read"):
            return
        try:
            status = bus.sync_read("Status", normalize=False)
            temps = bus.sync_read("Present_Temperature", normalize=False)
        except BUS_ERRORS as e:
            raise RobotError(f"{self._where()}: {e}") from None
        except (KeyError, NotImplementedError):  # a bus without these registers
            return
        for motor, bits in status.items():
            faults = [why for bit, why in STATUS_BITS.items() if int(bits) & (1 << bit)]
            if faults:
                raise RobotFault(f"{self._where()}: servo '{motor}' reports {' and '.join(faults)} "
                                 f"(status {int(bits):#04x}, {temps.get(motor, '?')} degC); the arm is stopped")

    def close(self) -> None:
        # best effort: a device that is gone (cable pulled) or faulted (a servo answering with an
        # error byte) cannot be told to let go; the port is closed all the same
        try:
            if self.device.is_connected:
                self.device.disconnect()
        except (*BUS_ERRORS, RuntimeError) as e:
            log.warning("%s: disconnect failed (%s); closing the port", self._where(), " ".join(str(e).split()))
            port = getattr(self._bus(), "port_handler", None)
            if port is not None and getattr(port, "is_open", False):
                try:
                    port.closePort()
                except BUS_ERRORS:
                    port.is_open = False

    def _camera_fault(self, e: BaseException) -> bool:
        """Whether `e` came from one of the device's cameras (LeRobot's messages start with the camera)."""
        cams = getattr(self.device, "cameras", None) or {}
        return any(str(cam) in str(e) for cam in cams.values())

    def get_observation(self) -> Observation:
        try:
            raw = self.device.get_observation()
        except (TimeoutError, RuntimeError) as e:
            if not self._camera_fault(e):
                if isinstance(e, TimeoutError):
                    raise RobotError(f"{self._where()}: {e}") from None
                raise
            raw = self._joints_without_cameras(e)
        except BUS_ERRORS as e:  # DeviceNotConnectedError is a ConnectionError
            raise RobotError(f"{self._where()}: {e}") from None
        feats = self.device.features() if hasattr(self.device, "features") else {}
        images = {c.name: np.asarray(raw[c.name]) for c in self._spec.cameras}
        if self._camera_stall is None:
            self._last_images = images
        return Observation(time.monotonic(), self._units.to_hal(raw), feats, images)

    def _joints_without_cameras(self, e: BaseException) -> dict:
        """A camera stopped delivering: the joints read on their own, the cameras' last frames
        kept, and the episode ends there (`outcome().truncated`; `reset()` waits for the camera)."""
        bus = self._bus()
        if bus is None or not self._last_images:
            raise RobotError(f"{self._where()}: a camera stopped delivering: {e}") from None
        if self._camera_stall is None:
            log.error("%s: a camera stopped delivering (%s): the episode ends here", self._where(), e)
        self._camera_stall = " ".join(str(e).split())
        self.camera_stalls += 1
        try:
            joints = bus.sync_read("Present_Position", num_retry=2)
        except BUS_ERRORS as err:
            raise RobotError(f"{self._where()}: {err}") from None
        return {**{f"{m}.pos": v for m, v in joints.items()}, **self._last_images}

    def send_action(self, action: np.ndarray) -> np.ndarray:
        a = self._spec.check_action(action)
        self._ticks += 1
        if self.health_every and self._ticks % self.health_every == 0:
            self.check_health()
        try:
            sent = self.device.send_action(self._units.to_lerobot(a))
        except BUS_ERRORS as e:
            raise RobotError(f"{self._where()}: {e}") from None
        return self._units.to_hal(sent)

    def reset(self, *, seed: int | None = None) -> Observation:
        if hasattr(self.device, "reset_episode"):  # a simulator can; a real arm stays where it is
            self.device.reset_episode(seed)
        if self._camera_stall is not None:
            self._wait_for_cameras()
        return self.get_observation()

    def _wait_for_cameras(self) -> None:
        """After a camera stopped delivering: wait up to `camera_wait_s` for fresh frames (the arm
        holds its last goal meanwhile); still none: the arm is lost, named."""
        deadline = time.monotonic() + self.camera_wait_s
        log.warning("%s: waiting up to %.0f s for the camera (%s)", self._where(), self.camera_wait_s, self._camera_stall)
        while True:
            try:
                self.device.get_observation()
                self._camera_stall = None
                log.warning("%s: the camera delivers again", self._where())
                return
            except (TimeoutError, RuntimeError) as e:
                if not self._camera_fault(e) or time.monotonic() > deadline:
                    raise RobotError(f"{self._where()}: a camera stopped delivering and did not come back "
                                     f"within {self.camera_wait_s:.0f} s: {e}") from None
            except BUS_ERRORS as e:
                raise RobotError(f"{self._where()}: {e}") from None
            time.sleep(0.2)

    def outcome(self) -> Outcome:
        out = self.device.outcome() if hasattr(self.device, "outcome") else Outcome()
        if self._camera_stall is not None:  # the episode ends where the camera stopped (a cut, not a failure)
            return Outcome(out.reward, out.success, out.terminated, truncated=True)
        return out


# LeRobot's TeleopEvents (and our `estop`, which LeRobot has no event for: sim_leader's scripted one;
# LeRobot's gamepad and keyboard have no e-stop button)
ESTOP_KEYS = (" ", "e")  # the keyboard's space bar (or e): e-stop; LeRobot's keyboards ignore both
READY_KEYS = ("n",)  # the scene is reset: start the next episode
ESTOP_BUTTON, READY_BUTTON = 2, 4  # pygame buttons: B/circle (LeRobot's gamepad leaves it unused), LB
_EVENT_MAP = {"success": TeleopEventKind.SUCCESS, "failure": TeleopEventKind.FAILURE,
              "terminate_episode": TeleopEventKind.FAILURE,
              "rerecord_episode": TeleopEventKind.RERECORD, "estop": TeleopEventKind.ESTOP,
              "ready": TeleopEventKind.READY}


def make_lerobot_teleop_device(options: Mapping[str, object]):
    """A LeRobot teleoperator from a plain dict: `type` plus its config fields."""
    _register("lerobot.teleoperators", TELEOP_MODULES)
    from lerobot.teleoperators.config import TeleoperatorConfig
    from lerobot.teleoperators.utils import make_teleoperator_from_config

    cfg_cls, opts = _choice(TeleoperatorConfig, "teleoperator", options)
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

    def __init__(self, device, joint_low: tuple[float, ...] = SO_ARM_LIMITS[0],
                 joint_high: tuple[float, ...] = SO_ARM_LIMITS[1], kind: str = "") -> None:
        self.device = device
        self.kind = kind  # the LeRobot type asked for (its config may carry another registered name)
        feats = device.action_features
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
                raise RobotError(f"teleop {self.name} is not calibrated (its servos do not match "
                                 f"{getattr(self.device, 'calibration_fpath', 'its calibration file')}): run "
                                 f"lerobot-calibrate --teleop.type={self.kind or getattr(self.device.config, 'type', self.name)} "
                                 f"--teleop.port=... --teleop.id={self.device.id}")
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
            return np.array([float(a["delta_x"]), float(a["delta_y"]), float(a["delta_z"]),
                             float(a.get("gripper", 1.0))], np.float32)
        except (*BUS_ERRORS, RuntimeError, KeyError, ValueError, TypeError) as e:  # pygame.error: unplugged
            raise self._lost(e) from None

    def events(self) -> list[TeleopEvent]:
        if not hasattr(self.device, "get_teleop_events"):
            return []
        # our keys: a tap (pressed and released since the last tick) is only in the listener's queue,
        # which get_action drains; a held key reaches the queue of "other keys", which LeRobot's
        # events empty: look in both, before each is drained
        ours = self._keys_in(getattr(self.device, "event_queue", None))
        if self.gives_ee:  # LeRobot's end-effector devices read their keys/axes in get_action
            self._ee_tick = self._read_ee()
        ours.update(self._keys_in(getattr(self.device, "misc_keys_queue", None)))
        ours.update(self._pad_buttons())
        try:
            polled = self.device.get_teleop_events()
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
    def _keys_in(queue) -> dict[str, bool]:  # noqa: ANN001 - a queue.Queue of LeRobot's keyboard
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
