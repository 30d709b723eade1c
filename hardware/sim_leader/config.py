"""Config of the scripted virtual leader arm, registered with LeRobot as `sim_leader`."""

from __future__ import annotations

from dataclasses import dataclass, field

from lerobot.teleoperators.config import TeleoperatorConfig


@TeleoperatorConfig.register_subclass("sim_leader")
@dataclass(kw_only=True)
class SimLeaderConfig(TeleoperatorConfig):
    """The scripted leader's sway (degrees, in get_action calls), its events by poll number, and when it
    unplugs."""

    amplitude_deg: float = 10.0  # joints sway around home by this much
    period_calls: int = 60  # calls to get_action per sway
    # poll number (one per control tick) -> event: is_intervention (toggles), success, failure,
    # rerecord_episode, estop
    events: dict[int, str] = field(default_factory=dict)
    disconnect_at: int = 0  # > 0: unplugged at this poll (later calls raise ConnectionError)
    # true: buttons only, no joint positions (as a gamepad's or keyboard's buttons beside a leader
    # arm, `teleop.events_from`): its takeover hands control to the session's leader arm
    buttons_only: bool = False
