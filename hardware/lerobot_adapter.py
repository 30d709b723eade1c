"""Any LeRobot robot behind `hal`: so100/so101 followers, koch, and our sim-backed `sim_so101`
(teleoperators: `hardware.lerobot_teleop`).

Units: LeRobot arms report `<motor>.pos` in degrees (`use_degrees=True`) and the gripper in
0..100; `hal` works in radians, with the gripper mapped onto its joint range. Errors from the
device (unplugged, not connected) become `RobotError` naming the robot and its port.

    device = make_lerobot_device({"type": "so101_follower", "port": "/dev/ttyACM0", "id": "left"})
    robot = LeRobotRobot(device, joint_low, joint_high, hz=30)     # a hal.Robot
"""

from __future__ import annotations

import logging
import termios
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from hal.robot import Robot, RobotError, RobotFault
from hal.spec import CameraSpec, Observation, Outcome, RobotSpec
from hal.units import LeRobotUnits

# Joint limits (rad) of the SO-100/SO-101 arm family (from our MJCF of the same arm).
log = logging.getLogger(__name__)
SO_ARM_LIMITS = ((-1.92, -1.75, -1.69, -1.66, -2.74, -0.17), (1.92, 1.75, 1.69, 1.66, 2.84, 1.75))


ROBOT_MODULES = ("so_follower", "koch_follower", "omx_follower")  # register their configs with LeRobot


def register_modules(package: str, modules: tuple[str, ...]) -> None:
    import importlib

    import hardware.sim_leader
    import hardware.sim_so101  # noqa: F401  (registers sim_so101 with LeRobot)

    for m in modules:
        try:
            importlib.import_module(f"{package}.{m}")
        except ImportError:  # an optional SDK is missing: that device type is unavailable
            pass


def config_choice(registry, what: str, options: Mapping[str, object]) -> tuple[type, dict]:
    """The registered config class for `options["type"]`, and the remaining options."""
    opts = {k: v for k, v in options.items() if v is not None}  # null in a config: the device's default
    kind = str(opts.pop("type"))
    try:
        return registry.get_choice_class(kind), opts
    except KeyError:
        raise RobotError(
            f"LeRobot has no {what} type '{kind}'; known: {sorted(registry.get_known_choices())}"
        ) from None


def make_lerobot_device(options: Mapping[str, object]):
    """A LeRobot robot from a plain dict: `type` plus that robot config's fields (cameras as
    `{name: {type: opencv, index_or_path: 0, width: 640, height: 480, fps: 30}}`)."""
    register_modules("lerobot.robots", ROBOT_MODULES)
    import importlib

    from lerobot.cameras.configs import CameraConfig
    from lerobot.robots.config import RobotConfig
    from lerobot.robots.utils import make_robot_from_config

    for cams_module in ("opencv", "zmq"):  # register LeRobot's camera config types
        try:
            importlib.import_module(f"lerobot.cameras.{cams_module}")
        except ImportError:
            pass
    cfg_cls, opts = config_choice(RobotConfig, "robot", options)
    kind = str(options["type"])
    cams = opts.pop("cameras", None)
    if cams and kind != "sim_so101":
        opts["cameras"] = {
            n: CameraConfig.get_choice_class(c.get("type", "opencv"))(
                **{k: v for k, v in dict(c).items() if k != "type"}
            )
            for n, c in dict(cams).items()
        }  # the caller's kept
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


def set_bus_timeout(device, floor_ms: float | None) -> None:
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

    def _loaded(self):
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

    def __init__(
        self,
        device,
        joint_low: tuple[float, ...] | None = None,
        joint_high: tuple[float, ...] | None = None,
        hz: float = 30.0,
        limits: Mapping[str, object] | None = None,
        kind: str = "",
        health_every: int = 10,
        camera_wait_s: float = 30.0,
    ) -> None:
        self.device = device
        keys = [k for k, t in device.action_features.items() if t is float]
        if joint_low is None or joint_high is None:
            limits_rad = getattr(device, "joint_limits_rad", None) or SO_ARM_LIMITS
            joint_low, joint_high = limits_rad
        if len(joint_low) != len(keys):
            raise RobotError(f"{device.name} has {len(keys)} joints {keys}; {len(joint_low)} limits were given")
        self._units = LeRobotUnits(keys, tuple(joint_low), tuple(joint_high))
        cams = tuple(
            CameraSpec(k, v[0], v[1])
            for k, v in device.observation_features.items()
            if isinstance(v, tuple) and len(v) == 3 and v[2] == 3
        )
        motion = {k: (tuple(v) if isinstance(v, list | tuple) else float(v)) for k, v in dict(limits or {}).items()}
        unknown = set(motion) - {"max_step_rad", "max_velocity_rad_s", "max_accel_rad_s2"}
        if unknown:
            raise RobotError(
                f"robot {device.name}: unknown limits {sorted(unknown)}; known: max_step_rad, "
                "max_velocity_rad_s, max_accel_rad_s2"
            )
        self._spec = RobotSpec(
            name=f"lerobot_{device.name}",
            joint_names=tuple(k.removesuffix(".pos") for k in keys),
            joint_low=tuple(joint_low),
            joint_high=tuple(joint_high),
            hz=hz,
            cameras=cams,
            features=tuple(getattr(device, "feature_spec", ())),
            **motion,
        )  # type: ignore[arg-type]
        if callable(getattr(device, "ee_position", None)):  # forward kinematics (rad -> m), where the device has it
            self.ee_position = device.ee_position
        elif kind in SO_ARMS and len(keys) == 6:
            self.ee_position = ArmKinematics()
        self.health_every = health_every
        self.kind = kind  # the LeRobot type asked for (so101_follower; LeRobot's config may name it so100_follower)
        self._ticks = 0
        self.camera_wait_s = camera_wait_s
        self.camera_stalls = 0  # observations made without fresh camera frames
        self.status_glitches = 0  # servo status reads showing a fault a second read did not confirm
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
            raise RobotError(
                f"{self._where()} is not calibrated (its servos do not match {where}): run "
                f"lerobot-calibrate --robot.type={self.kind or getattr(self.device.config, 'type', self.device.name)} "
                f"--robot.port=... --robot.id={self.device.id}"
            )
        self._ticks = 0

    def _bus(self):
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
        faults = self._read_faults(bus)
        if faults:  # confirmed by a second read from a clean port: a stale or torn reply (a late
            # answer to an earlier read, parsed as this one) must not stop the arm, a real fault persists
            port = getattr(getattr(bus, "port_handler", None), "ser", None)
            if port is not None and hasattr(port, "reset_input_buffer"):
                port.reset_input_buffer()
            again = self._read_faults(bus)
            confirmed = {m: v for m, v in again.items() if m in faults}
            if not confirmed:
                self.status_glitches += 1
                log.warning(
                    "%s: a servo status read %s, not confirmed by a second read; going on", self._where(), faults
                )
                return
            motor, (bits, temp, why) = next(iter(confirmed.items()))
            raise RobotFault(
                f"{self._where()}: servo '{motor}' reports {' and '.join(why)} "
                f"(status {bits:#04x}, {temp} degC); the arm is stopped"
            )

    def _read_faults(self, bus) -> dict[str, tuple[int, object, list[str]]]:
        """motor -> (status bits, temperature, the faults they say) for each servo reporting one."""
        try:
            status = bus.sync_read("Status", normalize=False)
            temps = bus.sync_read("Present_Temperature", normalize=False)
        except BUS_ERRORS as e:
            raise RobotError(f"{self._where()}: {e}") from None
        except (KeyError, NotImplementedError):  # a bus without these registers
            return {}
        out = {}
        for motor, bits in status.items():
            why = [w for bit, w in STATUS_BITS.items() if int(bits) & (1 << bit)]
            if why:
                out[motor] = (int(bits), temps.get(motor, "?"), why)
        return out

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
        log.warning(
            "%s: waiting up to %.0f s for the camera (%s)", self._where(), self.camera_wait_s, self._camera_stall
        )
        while True:
            try:
                self.device.get_observation()
                self._camera_stall = None
                log.warning("%s: the camera delivers again", self._where())
                return
            except (TimeoutError, RuntimeError) as e:
                if not self._camera_fault(e) or time.monotonic() > deadline:
                    raise RobotError(
                        f"{self._where()}: a camera stopped delivering and did not come back "
                        f"within {self.camera_wait_s:.0f} s: {e}"
                    ) from None
            except BUS_ERRORS as e:
                raise RobotError(f"{self._where()}: {e}") from None
            time.sleep(0.2)

    def outcome(self) -> Outcome:
        out = self.device.outcome() if hasattr(self.device, "outcome") else Outcome()
        if self._camera_stall is not None:  # the episode ends where the camera stopped (a cut, not a failure)
            return Outcome(out.reward, out.success, out.terminated, truncated=True)
        return out
