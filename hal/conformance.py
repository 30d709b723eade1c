"""The conformance suite every `hal.Robot` in the project passes (like Gymnasium's `check_env`).

    check_robot(lambda: SimRobot(ReachTask()))      # raises ConformanceError naming what is wrong

Checks: the spec is readable before connect and consistent; calls before connect fail with
RobotError; connect is idempotent; observations have the spec's shapes, finite states and
non-decreasing timestamps; `send_action` returns a finite action of the right shape inside the
limits; behind `SafeRobot`, NaN / wrong-shape / out-of-limit actions never leave the limits;
`outcome()` gives an `Outcome`; close is idempotent.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hal.robot import Robot, RobotError
from hal.safety import SafeRobot
from hal.spec import Observation, Outcome, RobotSpec


class ConformanceError(AssertionError):
    """A `Robot` broke the interface's contract (what, in the message)."""

    pass


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise ConformanceError(what)


def _check_obs(spec: RobotSpec, obs: Observation, where: str) -> None:
    _check(isinstance(obs, Observation), f"{where}: expected an Observation, got {type(obs).__name__}")
    _check(obs.state.shape == (spec.state_dim,), f"{where}: state shape {obs.state.shape} != ({spec.state_dim},)")
    _check(bool(np.all(np.isfinite(obs.state))), f"{where}: state has NaN/Inf")
    for name, dim in spec.features:
        _check(
            name in obs.features and np.shape(obs.features[name]) == (dim,),
            f"{where}: feature '{name}' missing or not of shape ({dim},)",
        )
    for cam in spec.cameras:
        img = obs.images.get(cam.name)
        _check(
            img is not None and img.shape == (cam.height, cam.width, 3) and img.dtype == np.uint8,
            f"{where}: camera '{cam.name}' frame is {None if img is None else (img.shape, img.dtype)}, "
            f"expected ({cam.height}, {cam.width}, 3) uint8",
        )


def check_robot(make: Callable[[], Robot], ticks: int = 20, seed: int = 0) -> None:
    """Run the `Robot` conformance suite on a robot from `make()`: spec readable before connect, observations
    of the declared shapes, finite state, actions clipped to the limits, resets with `seed`, `ticks`
    control steps, close. Raises ConformanceError naming the first broken rule."""
    robot = make()
    spec = robot.spec  # before connect
    _check(isinstance(spec, RobotSpec), "spec must be a RobotSpec readable before connect()")
    _check(spec.action_dim == len(spec.joint_names) > 0, "spec: action_dim must equal the number of joints")
    _check(bool(np.all(spec.low < spec.high)), "spec: every joint needs low < high")
    _check(spec.hz > 0, "spec: hz must be positive")
    try:
        robot.get_observation()
        raise ConformanceError("get_observation() before connect() must raise RobotError")
    except RobotError:
        pass
    robot.connect()
    robot.connect()  # idempotent
    try:
        obs = robot.reset(seed=seed)
        _check_obs(spec, obs, "reset()")
        rng = np.random.default_rng(seed)
        last_t = obs.timestamp
        for t in range(ticks):
            target = np.clip(
                spec.hold_action(obs.state) + rng.normal(0, 0.05, spec.action_dim), spec.low, spec.high
            ).astype(np.float32)
            applied = robot.send_action(target)
            _check(
                np.shape(applied) == (spec.action_dim,) and bool(np.all(np.isfinite(applied))),
                f"tick {t}: send_action must return a finite ({spec.action_dim},) action",
            )
            _check(
                bool(np.all(applied >= spec.low - 1e-5) and np.all(applied <= spec.high + 1e-5)),
                f"tick {t}: applied action {applied} outside the limits",
            )
            _check(isinstance(robot.outcome(), Outcome), "outcome() must return an Outcome")
            obs = robot.get_observation()
            _check_obs(spec, obs, f"tick {t}")
            _check(obs.timestamp >= last_t, f"tick {t}: observation timestamps went backwards")
            last_t = obs.timestamp
        safe = SafeRobot(robot)
        safe.reset(seed=seed)
        rng = np.random.default_rng(seed + 1)
        for bad in (
            np.full(spec.action_dim, np.nan),
            np.zeros(spec.action_dim + 1),
            rng.normal(0, 100, spec.action_dim),
            np.full(spec.action_dim, np.inf),
        ):
            applied = safe.send_action(np.asarray(bad, np.float32))
            _check(
                bool(np.all(applied >= spec.low - 1e-5) and np.all(applied <= spec.high + 1e-5)),
                f"behind SafeRobot, action {bad} led to {applied}, outside the limits",
            )
    finally:
        robot.close()
    robot.close()  # idempotent
