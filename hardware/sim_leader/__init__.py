"""`SimLeader`: a LeRobot `Teleoperator` standing in for a leader arm and its buttons: joint
positions follow a scripted sway (degrees, gripper 0..100, like `so101_leader`), and events fire
at scripted poll numbers (`get_teleop_events` calls: the control loop polls once per tick, so
`events={300: estop}` fires on the run's 300th tick). It lets takeovers, labels and the e-stop
path run end to end here. With `buttons_only=true` it has no joint positions (its action features
are empty): the buttons beside a leader arm, whose takeover hands control to that arm."""

from __future__ import annotations

import math

from lerobot.teleoperators.teleoperator import Teleoperator

from hardware._no_calibration import NoCalibration
from hardware.sim_leader.config import SimLeaderConfig
from hardware.sim_so101 import MOTORS

HOME_DEG = (0.0, 11.5, 74.5, 51.6, 0.0)


class SimLeader(NoCalibration, Teleoperator):
    """The `sim_leader` teleoperator: a scripted leader arm and buttons (see the module's docstring)."""

    config_class = SimLeaderConfig
    name = "sim_leader"

    def __init__(self, config: SimLeaderConfig) -> None:
        super().__init__(config)
        self.config = config
        self._connected = False
        self._calls = 0
        self._polls = 0
        self._intervening = False

    @property
    def action_features(self) -> dict:
        return {} if self.config.buttons_only else {f"{m}.pos": float for m in MOTORS}

    @property
    def feedback_features(self) -> dict:
        return {}

    @property
    def is_connected(self) -> bool:
        return self._connected

    def connect(self, calibrate: bool = True) -> None:
        self._connected = True

    def get_action(self) -> dict[str, float]:
        if not self._connected:
            raise ConnectionError("sim_leader is not connected")
        if self.config.buttons_only:
            return {}
        self._calls += 1
        s = math.sin(2 * math.pi * self._calls / self.config.period_calls) * self.config.amplitude_deg
        out = {f"{m}.pos": h + s for m, h in zip(MOTORS[:-1], HOME_DEG, strict=False)}
        out["gripper.pos"] = 50.0 + s
        return out

    def get_teleop_events(self) -> dict[str, bool]:
        if not self._connected:
            raise ConnectionError("sim_leader is not connected")
        self._polls += 1
        if self._polls == self.config.disconnect_at:
            self._connected = False  # scripted unplug: the next call raises, like a real arm's bus
        event = self.config.events.get(self._polls)
        if event == "is_intervention":
            self._intervening = not self._intervening
        return {"is_intervention": self._intervening, **({event: True} if event and event != "is_intervention" else {})}

    def send_feedback(self, feedback: dict) -> None:
        pass

    def disconnect(self) -> None:
        self._connected = False


__all__ = ["SimLeader", "SimLeaderConfig"]
