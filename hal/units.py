"""Units, converted in one place: LeRobot's arm convention <-> ours, and the ranges a task's own
recordings give some entries in (pure numpy: no LeRobot, no torch).

LeRobot arms (`so101_follower` with `use_degrees=True`, `sim_so101`, lerobot-record datasets of
them) give `<motor>.pos` in degrees for the arm joints and the gripper in 0..100 (0 closed, 100
open). `hal` works in rad, the gripper in its joint's range `[low, high]` (rad): LeRobot's gripper 0
is the joint's `low`, 100 its `high`. A key whose name (without `.pos`) starts with `gripper` is the
gripper. `LeRobotUnits` is that mapping, for one reading (a dict) or arrays `[..., A]` (chunks,
datasets); the LeRobot adapter, the LeRobot policies (`units: deg`) and dataset imports all use it.

`Rescale` is one entry a task's own environment reports in another range than the task gives it
(gym_hil's gripper command: the actuator's 0..255 in its `agent_pos`, a fraction 0..1 in our
state), declared next to the task so that data recorded from the raw environment can be converted
on import (robo_async/buffer/lerobot_import.py).

    units = LeRobotUnits(["shoulder_pan.pos", ..., "gripper.pos"], spec.joint_low, spec.joint_high)
    q = units.to_hal(device.get_observation())           # rad, float32 [A]
    chunk_rad = units.to_hal_array(chunk_deg)             # [H, A]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

DEGREES_PER_RAD = 180.0 / np.pi
GRIPPER_SPAN = 100.0  # LeRobot's gripper: 0 (closed) .. 100 (open)


def joint_of(key: str) -> str:
    """The joint a LeRobot key names (`shoulder_pan.pos` -> `shoulder_pan`)."""
    return key.removesuffix(".pos")


def is_gripper(key: str) -> bool:
    """Whether a LeRobot key (or a joint name) is a gripper: its joint name starts with `gripper`."""
    return joint_of(key).startswith("gripper")


class LeRobotUnits:
    """LeRobot `<motor>.pos` values <-> rad, per key in `keys` (the order of our joint vector): arm
    joints degrees <-> rad, the gripper 0..100 <-> its joint range `[low, high]` (rad). Every
    conversion is affine per entry with a positive scale, so minima and maxima map to minima and
    maxima."""

    def __init__(self, keys: Sequence[str], low: Sequence[float], high: Sequence[float]) -> None:
        if not (len(keys) == len(low) == len(high)):
            raise ValueError(
                f"LeRobotUnits: {len(keys)} keys {list(keys)} but {len(low)} lower and {len(high)} upper limits"
            )
        self.keys = list(keys)
        for k, lo, hi in zip(self.keys, low, high, strict=False):
            if is_gripper(k) and not hi > lo:
                raise ValueError(f"LeRobotUnits: gripper {k} needs low < high (rad), got {lo}..{hi}")
        # hal = lerobot * scale + offset
        self.scale = np.array(
            [
                (hi - lo) / GRIPPER_SPAN if is_gripper(k) else 1.0 / DEGREES_PER_RAD
                for k, lo, hi in zip(self.keys, low, high, strict=False)
            ],
            np.float64,
        )
        self.offset = np.array(
            [lo if is_gripper(k) else 0.0 for k, lo in zip(self.keys, low, strict=False)], np.float64
        )

    def to_hal(self, values: Mapping[str, float]) -> np.ndarray:
        """One LeRobot reading (`{key: value}`, other keys ignored) -> joint positions (rad), float32 [A]."""
        return self.to_hal_array(np.array([float(values[k]) for k in self.keys], np.float64))

    def to_lerobot(self, q: np.ndarray) -> dict[str, float]:
        """Joint positions (rad) [A] -> `{key: value}` in LeRobot's units."""
        return {
            k: float(v) for k, v in zip(self.keys, (np.asarray(q, np.float64) - self.offset) / self.scale, strict=False)
        }

    def to_hal_array(self, values: np.ndarray) -> np.ndarray:
        """LeRobot values [..., A] (keys' order) -> rad, float32 [..., A]."""
        v = self._checked(values)
        return (v * self.scale + self.offset).astype(np.float32)

    def to_lerobot_array(self, q: np.ndarray) -> np.ndarray:
        """Joint positions (rad) [..., A] -> LeRobot's units, float32 [..., A]."""
        v = self._checked(q)
        return ((v - self.offset) / self.scale).astype(np.float32)

    def _checked(self, a: np.ndarray) -> np.ndarray:
        v = np.asarray(a, np.float64)
        if v.ndim == 0 or v.shape[-1] != len(self.keys):
            raise ValueError(
                f"LeRobotUnits: values of shape {v.shape}; the last axis must hold the "
                f"{len(self.keys)} joints {self.keys}"
            )
        return v


@dataclass(frozen=True)
class Rescale:
    """Entry `index` of a task's `vector` ("state" or "action") as its environment reports it
    (`source`, e.g. gym_hil's gripper command 0..255) and as the task gives it (`target`, e.g. 0..1):
    the affine map between the two ranges, declared next to the task."""

    vector: str  # "state" (Observation.state) or "action"
    index: int  # entry of that vector
    name: str  # what the entry is, for messages ("gripper command")
    source: tuple[float, float]  # (low, high) the environment reports
    target: tuple[float, float]  # (low, high) the task gives

    def __post_init__(self) -> None:
        if self.vector not in ("state", "action"):
            raise ValueError(f"Rescale {self.name}: vector must be 'state' or 'action', not {self.vector!r}")
        if not (self.source[1] > self.source[0] and self.target[1] > self.target[0]):
            raise ValueError(f"Rescale {self.name}: ranges need low < high, got {self.source} -> {self.target}")

    def to_target(self, x: np.ndarray | float) -> np.ndarray:
        """Values of the entry in the `source` range -> the `target` range (float64)."""
        (s0, s1), (t0, t1) = self.source, self.target
        return (np.asarray(x, np.float64) - s0) * ((t1 - t0) / (s1 - s0)) + t0

    def apply(self, values: np.ndarray) -> np.ndarray:
        """A copy of `values` [..., n] with entry `index` mapped from `source` to `target`."""
        out = np.array(values, copy=True)
        out[..., self.index] = self.to_target(out[..., self.index]).astype(out.dtype)
        return out
