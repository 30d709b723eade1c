"""Static descriptions of a robot, readable before it is connected."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np


class SpecMismatch(ValueError):
    """An action or observation does not match the robot's spec (shape, dtype, finiteness)."""


@dataclass(frozen=True)
class CameraSpec:
    """One RGB camera: frames are uint8 arrays of shape (height, width, 3)."""

    name: str
    height: int
    width: int


@dataclass(frozen=True)
class RobotSpec:
    """What a robot is, independent of whether it is connected.

    Joint angles are in rad; `hz` is the control rate in ticks per second. Actions are absolute
    joint-position targets, one per joint, clipped to `[joint_low, joint_high]` before they
    reach the hardware, and by `hal.SafeRobot` to the motion limits (`max_step_rad`,
    `max_velocity_rad_s`, `max_accel_rad_s2`; infinite, i.e. off, by default, as suits a
    simulator). `features` names extra vector observations (task state such as a target
    position, in metres) with their lengths.
    """

    name: str
    joint_names: tuple[str, ...]
    joint_low: tuple[float, ...]
    joint_high: tuple[float, ...]
    hz: float
    cameras: tuple[CameraSpec, ...] = ()
    features: tuple[tuple[str, int], ...] = ()
    max_step_rad: float = float("inf")  # largest change of a joint target per tick, rad
    control_mode: str = "joint_position"  # or e.g. "gym": actions are not joint targets
    state_size: int | None = None  # length of Observation.state when it is not one value per joint
    # motion limits on the joint targets, one value for every joint or a tuple with one per joint:
    # velocity in rad/s (a change per tick of at most max_velocity_rad_s * dt, with max_step_rad),
    # acceleration in rad/s^2 (the change per tick grows by at most max_accel_rad_s2 * dt^2 a tick)
    max_velocity_rad_s: float | tuple[float, ...] = float("inf")
    max_accel_rad_s2: float | tuple[float, ...] = float("inf")

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        if len(self.joint_low) != n or len(self.joint_high) != n:
            raise SpecMismatch(
                f"robot {self.name}: {n} joints but {len(self.joint_low)} lower and {len(self.joint_high)} upper limits"
            )
        if any(lo >= hi for lo, hi in zip(self.joint_low, self.joint_high, strict=False)):
            raise SpecMismatch(f"robot {self.name}: every joint_low must be below joint_high")
        if self.hz <= 0:
            raise SpecMismatch(f"robot {self.name}: hz must be positive, got {self.hz}")
        for name in ("max_velocity_rad_s", "max_accel_rad_s2"):
            value = getattr(self, name)
            if isinstance(value, list):  # from a YAML config: kept as a tuple, hashable like the rest
                object.__setattr__(self, name, value := tuple(value))
            values = value if isinstance(value, tuple) else (value,)
            if isinstance(value, tuple) and len(value) != n:
                raise SpecMismatch(
                    f"robot {self.name}: {name} has {len(value)} values for {n} joints "
                    "(give one per joint, or one number for all)"
                )
            if not all(v > 0 for v in values):  # also refuses NaN
                raise SpecMismatch(f"robot {self.name}: {name} must be positive (inf: no limit), got {value}")

    @property
    def action_dim(self) -> int:
        """Action size: one command per joint."""
        return len(self.joint_names)

    @property
    def state_dim(self) -> int:
        """State size (`state_size` when set, else one value per joint)."""
        return self.state_size if self.state_size is not None else len(self.joint_names)

    def hold_action(self, state: np.ndarray) -> np.ndarray:
        """The action that keeps the robot where it is: the current joint positions for position
        control, the middle of the action range otherwise (e.g. zero torque)."""
        if self.control_mode == "joint_position":
            return np.asarray(state, dtype=np.float32)[: self.action_dim].copy()
        return ((self.low + self.high) / 2).astype(np.float32)

    def forward_state(self, state: np.ndarray, committed: np.ndarray) -> np.ndarray:
        """The robot's forward model for asynchronous inference: the state expected once the
        `committed` actions [d, A] have run. Position control: the last committed target;
        velocity control: the integral; otherwise the current state. Robots whose dynamics need
        more (e.g. a slow arm that lags its targets) subclass RobotSpec and override this."""
        state = np.asarray(state, np.float32)
        if len(committed) == 0:
            return state.copy()
        if self.control_mode == "joint_position":
            out = state.copy()
            out[: self.action_dim] = np.asarray(committed[-1], np.float32)[: self.action_dim]
            return out
        if self.control_mode == "joint_velocity":
            out = state.copy()
            out[: self.action_dim] += np.sum(committed, axis=0)[: self.action_dim] * self.dt
            return out.astype(np.float32)
        return state.copy()

    def velocity_limits(self) -> tuple[float, ...]:
        """`max_velocity_rad_s` for each joint (rad/s; inf where there is no limit)."""
        return _per_joint(self.max_velocity_rad_s, len(self.joint_names))

    def accel_limits(self) -> tuple[float, ...]:
        """`max_accel_rad_s2` for each joint (rad/s^2; inf where there is no limit)."""
        return _per_joint(self.max_accel_rad_s2, len(self.joint_names))

    @property
    def dt(self) -> float:
        """Control period in seconds."""
        return 1.0 / self.hz

    @property
    def low(self) -> np.ndarray:
        """Lower joint limits as a read-only float32 array (rad for revolute joints)."""
        return _frozen_array(self.joint_low)

    @property
    def high(self) -> np.ndarray:
        """Upper joint limits as a read-only float32 array (rad for revolute joints)."""
        return _frozen_array(self.joint_high)

    def feature_dims(self) -> dict[str, int]:
        """Extra observation features beyond the state: name -> size."""
        return dict(self.features)

    def signature(self) -> dict[str, object]:
        """A plain, comparable summary used to check that checkpoints and data fit this robot."""
        return {
            "name": self.name,
            "joints": list(self.joint_names),
            "features": [[k, n] for k, n in self.features],
            "cameras": [[c.name, c.height, c.width] for c in self.cameras],
        }

    def check_action(self, action: np.ndarray) -> np.ndarray:
        """Return `action` as float32 of shape (action_dim,), or raise SpecMismatch."""
        a = np.asarray(action, dtype=np.float32)
        if a.shape != (self.action_dim,):
            raise SpecMismatch(f"action has shape {a.shape}, robot {self.name} expects ({self.action_dim},)")
        if not np.all(np.isfinite(a)):
            raise SpecMismatch(f"action for robot {self.name} contains NaN/Inf: {a.tolist()}")
        return a


def _per_joint(value: float | tuple[float, ...], n: int) -> tuple[float, ...]:
    return tuple(float(v) for v in value) if isinstance(value, tuple) else (float(value),) * n


@functools.lru_cache(maxsize=256)
def _frozen_array(values: tuple[float, ...]) -> np.ndarray:
    """Joint limits as a read-only float32 array, made once (the safety layer reads them every tick)."""
    a = np.asarray(values, dtype=np.float32)
    a.setflags(write=False)
    return a


@dataclass(frozen=True)
class Observation:
    """One timestamped reading of a robot.

    `timestamp` is `time.monotonic()` seconds at capture; `state` holds joint positions in rad;
    `features` holds task vectors named in the spec; `images` holds uint8 HxWx3 frames by camera.
    """

    timestamp: float
    state: np.ndarray
    features: dict[str, np.ndarray] = field(default_factory=dict)
    images: dict[str, np.ndarray] = field(default_factory=dict)

    def as_dict(self) -> dict[str, np.ndarray]:
        """Flat mapping used by policies: 'state', each feature, and each camera by name."""
        out: dict[str, np.ndarray] = {"state": self.state}
        out.update(self.features)
        out.update(self.images)
        return out


@dataclass(frozen=True)
class Outcome:
    """What the task says about the last tick: reward, success, and whether the episode ended:
    `terminated` (the task ended it: success, failure) or `truncated` (a time limit or other cut the
    task itself makes, e.g. a Gymnasium env's; the value of the next state still counts)."""

    reward: float = 0.0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
