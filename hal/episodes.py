"""Between episodes on a real arm: home along the capped path, then wait for the scene.

A simulator resets itself; a real arm cannot. Before each episode `EpisodeReset.run` takes the arm
home through the safety layer's own capped path (`SafeRobot.approach`, one target per tick at the
robot's rate), then waits, holding position (so the watchdog stays quiet):

- `wait="operator"`: for the operator's "scene reset" signal (`TeleopEventKind.READY`: key `n`,
  the gamepad's LB, or a scripted event), reminding them every `remind_s`; an e-stop during the
  wait stops the arm and the wait goes on;
- `wait="timer"`: `wait_s` seconds (a scripted reset, or a scene that resets itself);
- `wait="none"`: straight on.

Counted in `stats` (homes, ticks spent, waits) for the dashboard. Built from a robot config's
`episode` block (`configs/robot/so101.yaml`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from hal.robot import RobotError
from hal.teleop import Teleop, TeleopEventKind

log = logging.getLogger(__name__)
WAITS = ("operator", "timer", "none")


@dataclass
class ResetStats:
    """What resets cost, for metrics under `reset/`."""

    homes: int = 0  # returns home
    home_ticks: int = 0  # ticks spent going home, in all
    waits: int = 0  # waits for the scene
    wait_s: float = 0.0  # seconds spent waiting, in all


@dataclass
class EpisodeReset:
    """Home pose (rad, one per joint; None: stay) and how to wait for the scene (see the module)."""

    home: tuple[float, ...] | None = None
    wait: str = "operator"
    wait_s: float = 5.0
    remind_s: float = 10.0
    stats: ResetStats = field(default_factory=ResetStats)

    def __post_init__(self) -> None:
        if self.wait not in WAITS:
            raise ValueError(f"episode.reset must be one of {list(WAITS)}, not '{self.wait}'")
        if self.wait_s < 0:
            raise ValueError(f"episode.reset_s must be >= 0, got {self.wait_s}")

    @classmethod
    def from_config(cls, episode: Mapping[str, object] | None) -> EpisodeReset | None:
        """From a robot config's `episode` block (`home`, `reset`, `reset_s`); None without one."""
        if not episode:
            return None
        home = episode.get("home")
        if home is not None and not isinstance(home, Sequence):
            raise ValueError(f"episode.home must be a list of joint positions (rad), got {home!r}")
        wait_s = episode.get("reset_s", 5.0)
        if not isinstance(wait_s, int | float | str):
            raise ValueError(f"episode.reset_s must be a number of seconds, got {wait_s!r}")
        return cls(
            home=tuple(float(x) for x in home) if home is not None else None,
            wait=str(episode.get("reset", "operator")),
            wait_s=float(wait_s),
        )

    def run(
        self,
        robot,
        teleops: Sequence[Teleop] = (),
        stop: Callable[[], bool] = lambda: False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Take `robot` (a `SafeRobot`) home, then wait (see the module's docstring); returns
        early when `stop()` says so. Paced at the robot's rate."""
        dt = robot.spec.dt
        if self.home is not None:
            if len(self.home) != robot.spec.action_dim:
                raise RobotError(
                    f"episode.home has {len(self.home)} joints; {robot.spec.name} has {robot.spec.action_dim}"
                )
            self.stats.homes += 1
            try:
                for q in robot.approach(np.asarray(self.home, np.float32)):
                    if stop():
                        return
                    robot.send_action(q)
                    self.stats.home_ticks += 1
                    sleep(dt)
            except RobotError as e:  # the e-stop latched on the way: the arm holds where it is
                log.warning("return home stopped: %s", e)
        if self.wait == "none":
            return
        self.stats.waits += 1
        start = last_note = time.monotonic()
        can_signal = any(getattr(t, "signals_ready", True) for t in teleops)
        wait = self.wait if teleops and can_signal else "timer"
        held = (
            np.asarray(self.home, np.float32)
            if self.home is not None
            else robot.spec.hold_action(robot.get_observation().state)
        )
        if wait == "operator":
            log.warning("waiting for the scene reset: press n (keyboard) or LB (gamepad) when it is ready")
        while not stop():
            if wait == "timer" and time.monotonic() - start >= self.wait_s:
                break
            if wait == "operator" and self._ready(robot, teleops):
                break
            if wait == "operator" and time.monotonic() - last_note > self.remind_s:
                log.warning("still waiting for the scene reset (%.0f s): press n or LB", time.monotonic() - start)
                last_note = time.monotonic()
            robot.send_action(held)  # holds (the watchdog stays quiet); under an e-stop the layer holds
            sleep(dt)
        self.stats.wait_s += time.monotonic() - start

    @staticmethod
    def _ready(robot, teleops: Sequence[Teleop]) -> bool:
        from hal.teleop import poll_events

        ready = False
        for _, e in poll_events(list(teleops), robot, on_lost=lambda t, err: log.error("%s", err)):
            ready = ready or e.kind is TeleopEventKind.READY
        return ready
