"""The virtual operator of `robo-async bench twin`: its buttons (`Buttons`, events only, pressed by
the bench: the e-stop) and its hand (`ReachingHand`), which moves the SO-101 twin's leader arm along
a minimum-jerk reach to each HIL episode's target and takes over with its button, as a person at
the leader arm would."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hal.teleop import Teleop, TeleopEvent, TeleopEventKind
from hardware.twin.process import TwinProcess


class Buttons(Teleop):
    """An operator's buttons (events only): `press(kind)` queues an event for the loop's next poll."""

    def __init__(self) -> None:
        self._pending: list[TeleopEvent] = []

    @property
    def name(self) -> str:
        return "bench-buttons"

    def connect(self) -> None:
        pass

    def press(self, kind: TeleopEventKind) -> None:
        self._pending.append(TeleopEvent(kind))

    def get_action(self) -> np.ndarray | None:
        return None

    def events(self) -> list[TeleopEvent]:
        out, self._pending = self._pending, []
        return out

    def close(self) -> None:
        pass


class ReachingHand(Buttons):
    """The HIL figure's virtual operator: at each episode's first tick its hand starts moving the
    twin's leader arm from where it is to that episode's target (rad) along a minimum-jerk path of
    `reach_ticks`, and its button takes over (control goes to the leader arm); at the episode's
    last tick it hands back. Episodes are `episode_ticks` long (the loop truncates them there)."""

    def __init__(self, twin: TwinProcess, targets: list[np.ndarray], episode_ticks: int, reach_ticks: int) -> None:
        super().__init__()
        self.twin, self.targets = twin, targets
        self.episode_ticks, self.reach_ticks = episode_ticks, reach_ticks
        self._tick = 0
        self._start = np.zeros(6)

    @property
    def name(self) -> str:
        return "virtual-hand"

    def observe(self, obs: Mapping[str, np.ndarray], evaluation: bool) -> None:
        k, episode = self._tick % self.episode_ticks, self._tick // self.episode_ticks
        self._tick += 1
        target = self.targets[min(episode, len(self.targets) - 1)]
        if k == 0:
            self._start = np.asarray(self.twin.state("leader")["q"])
            self.press(TeleopEventKind.INTERVENTION_ON)
        elif k == self.episode_ticks - 1:
            self.press(TeleopEventKind.INTERVENTION_OFF)
        s = min(1.0, (k + 1) / self.reach_ticks)
        blend = s**3 * (10 - 15 * s + 6 * s * s)
        self.twin.control("hand", role="leader", q=self._start + (target - self._start) * blend)
