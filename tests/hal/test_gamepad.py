"""LeRobot's `gamepad` teleoperator (its own GamepadTeleop and pygame controller) drives a
joint-space arm through inverse kinematics and gym_hil in its own action space, through the one
control loop's takeover path. The pad is virtual: pygame finds no joystick on this machine, so the
test stands one in behind pygame's joystick API and posts its button events to pygame's real event
queue, as SDL would for a plugged-in pad."""

import numpy as np
import pytest

from hal.safety import SafeRobot
from policies.scripted import HoldPolicy
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.records import EpisodeLog
from robo_async.launch.tasks import TaskArgs, make_robot, make_teleops

pygame = pytest.importorskip("pygame")

INTERVENE, CLOSE, SUCCESS = 5, 6, 3  # LeRobot's buttons: RB holds a takeover, 6 closes the gripper, Y success


class Pad:
    """A gamepad as pygame's joystick API shows one: the test moves its sticks and presses its buttons;
    unplugged, every reading raises pygame.error (as SDL's does for a removed device)."""

    def __init__(self) -> None:
        self.axes, self.buttons, self.unplugged = [0.0] * 6, [0] * 12, False

    def init(self) -> None:
        pass

    def quit(self) -> None:
        pass

    def get_name(self) -> str:
        return "virtual pad"

    def _check(self) -> None:
        if self.unplugged:
            raise pygame.error("Invalid joystick device number")

    def get_axis(self, i: int) -> float:
        self._check()
        return self.axes[i]

    def get_button(self, i: int) -> int:
        self._check()
        return self.buttons[i]

    def press(self, b: int, down: bool = True) -> None:
        self.buttons[b] = int(down)
        pygame.event.post(
            pygame.event.Event(pygame.JOYBUTTONDOWN if down else pygame.JOYBUTTONUP, button=b, joy=0, instance_id=0)
        )


@pytest.fixture
def pad(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("SDL_AUDIODRIVER", "dummy")
    made = Pad()
    monkeypatch.setattr(pygame.joystick, "get_count", lambda: 1)
    monkeypatch.setattr(pygame.joystick, "Joystick", lambda index: made)
    return made


def session(task: TaskArgs):
    robot = SafeRobot(make_robot(task))
    (teleop,) = make_teleops(TaskArgs(task.name, task.options, teleop={"type": "gamepad"}), robot)
    assert type(teleop.device.device).__name__ == "GamepadTeleop"  # LeRobot's own class
    teleop.connect()
    robot.connect()
    return robot, teleop


def drive(robot, teleop, script, ticks, episode_ticks=200):
    """The control loop with a holding policy; `script[tick]` is a function of the pad, run after that tick."""
    applied, pad_actions = [], []
    sink = EpisodeLog()

    def observe(info):
        applied.append(np.asarray(info.applied, np.float64).copy())
        if info.tick in script:
            script[info.tick]()

    loop = ControlLoop(
        robot,
        HoldPolicy(robot.spec),
        LoopConfig(episode_ticks=episode_ticks, max_steps=ticks, inference="inline", eval_every=0),
        sink=sink,
        teleops=(teleop,),
        observer=observe,
    )
    loop.run()
    return np.asarray(applied), loop, pad_actions


def test_the_gamepad_takes_over_a_joint_space_arm_through_ik_and_hands_back_without_a_jump(pad):
    robot, teleop = session(TaskArgs("pick_lift", {}))
    inner = robot.inner
    try:
        robot.reset(seed=0)
        start = inner.ee_position(robot.get_observation().state[:6])

        def take():  # RB held, left stick forward (LeRobot's delta_x = -axis 1)
            pad.press(INTERVENE)
            pad.axes[1] = -1.0

        def give_back():
            pad.axes[1] = 0.0
            pad.press(INTERVENE, down=False)

        applied, loop, _ = drive(robot, teleop, {4: take, 24: give_back}, 35)
        moved = inner.ee_position(applied[24].astype(np.float32)) - start
        assert moved[0] > 0.1 and abs(moved[1]) < 0.02 and abs(moved[2]) < 0.02, moved
        # taking over, driving and handing back: no joint moved more than the IK's cap in a tick
        steps = np.abs(np.diff(applied, axis=0)).max(axis=1)
        assert steps.max() <= teleop.max_joint_step + 1e-5, steps.max()
        assert robot.stats.clipped == 0
        assert loop.operators.takeovers == 1 and loop.operators.active is None
        left = inner.ee_position(applied[25].astype(np.float32))
        assert np.linalg.norm(inner.ee_position(applied[-1].astype(np.float32)) - left) < 0.02  # the policy holds there
    finally:
        teleop.close()
        robot.close()


def test_the_gamepad_drives_gym_hil_and_its_success_button_ends_the_episode(pad):
    robot, teleop = session(TaskArgs("gym_hil", {}))
    try:
        tcp0 = robot.reset(seed=0).state[-3:].copy()

        def take():  # RB held, right stick up (delta_z = -axis 3)
            pad.press(INTERVENE)
            pad.axes[3] = -1.0

        def close():
            pad.axes[3] = 0.0
            pad.press(CLOSE)

        def success():
            pad.press(CLOSE, down=False)
            pad.press(SUCCESS)

        applied, loop, _ = drive(
            robot, teleop, {1: take, 9: close, 11: success, 12: lambda: pad.press(SUCCESS, False)}, 16
        )
        assert applied[5].tolist() == [0.0, 0.0, 1.0, 1.0]  # up, the gripper stays (gym_hil's 1)
        assert applied[11].tolist() == [0.0, 0.0, 0.0, 2.0]  # LeRobot's close is gym_hil's 2
        assert loop.operators.labels["success"] == 1 and loop.episodes >= 1  # Y labelled the episode and ended it
        assert robot.get_observation().state[-1] > tcp0[2] or loop.episodes >= 1
    finally:
        teleop.close()
        robot.close()


def test_a_gamepad_unplugged_mid_takeover_holds_the_robot_and_the_run_goes_on(pad, caplog):
    robot, teleop = session(TaskArgs("pick_lift", {}))
    try:
        robot.reset(seed=0)

        def take():
            pad.press(INTERVENE)
            pad.axes[1] = -1.0

        def unplug():
            pad.unplugged = True
            pad.press(INTERVENE, down=False)  # whatever SDL still queues, the pad cannot be read

        applied, loop, _ = drive(robot, teleop, {4: take, 12: unplug}, 40)
        ops = loop.operators
        assert ops.lost == 1 and ops.active is None and ops.teleops == []
        # tick 13: the pad could not be read; the robot held where the operator had left it
        np.testing.assert_allclose(applied[13], applied[12], atol=1e-6)
        assert not np.allclose(applied[12], applied[4])  # (the operator had moved it)
        assert len(applied) == 40  # the run went on, the policy driving: it holds about where the operator left it
        fk = robot.inner.ee_position
        assert np.linalg.norm(fk(applied[-1].astype(np.float32)) - fk(applied[13].astype(np.float32))) < 0.02
        assert np.abs(np.diff(applied, axis=0)).max() <= teleop.max_joint_step + 1e-5 and robot.stats.clipped == 0
        assert any("teleop gamepad lost" in r.getMessage() and "robot holds" in r.getMessage() for r in caplog.records)
    finally:
        robot.close()


def test_no_gamepad_plugged_in_is_one_line_at_connect(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setattr(pygame.joystick, "get_count", lambda: 0)
    from hal.robot import RobotError

    robot = SafeRobot(make_robot(TaskArgs("pick_lift", {})))
    (teleop,) = make_teleops(TaskArgs("pick_lift", {}, teleop={"type": "gamepad"}), robot)
    with pytest.raises(RobotError, match="teleop gamepad cannot connect: no gamepad found"):
        teleop.connect()
