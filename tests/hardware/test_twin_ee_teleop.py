"""End-effector teleop on the SO-101 twin: LeRobot's own gamepad (a virtual pad behind pygame's
joystick API, as in tests/hal/test_gamepad.py) and keyboard_ee (keys put where its pynput listener
puts them) drive LeRobot's own so101_follower through inverse kinematics on the arm's MJCF
(`ArmKinematics`, MuJoCo's Jacobian), inside the real-time control loop behind the safety layer;
their e-stop buttons latch the stop within the tick."""

import enum

import numpy as np
import pytest

from hardware.lerobot_adapter import ArmKinematics
from policies.scripted import HoldPolicy
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.records import EpisodeLog
from robo_async.launch.tasks import REAL_ARM_SAFETY, make_safe_robot, make_teleops, task_args
from tests.hal.test_ee_teleop import Listener
from tests.hal.test_gamepad import INTERVENE, Pad, pygame

TICK = 2 * np.pi / 4096  # one encoder tick (rad): LeRobot sends goals as whole ticks
CAP = 0.05  # rad per tick at the servos: the safety layer's cap (and the IK's own, `max_joint_step`)
BENT = [0.0, 0.3, 1.2, 1.2, 0.0, 0.5]  # rad: the end effector ~(0.22, 0, 0.10) m, well inside its reach
ESTOP_BUTTON = 2  # B (hardware.lerobot_teleop's binding)


class Key(enum.Enum):
    """pynput's key names (its OS backends need a desktop session, which this machine lacks)."""

    up, down, left, right, shift, shift_r, ctrl_r, ctrl_l, esc, space = range(10)


@pytest.fixture
def pad(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("SDL_AUDIODRIVER", "dummy")
    made = Pad()
    monkeypatch.setattr(pygame.joystick, "get_count", lambda: 1)
    monkeypatch.setattr(pygame.joystick, "Joystick", lambda index: made)
    return made


@pytest.fixture
def keyboard(monkeypatch):
    import types

    import lerobot.teleoperators.keyboard.teleop_keyboard as tk

    ns = types.SimpleNamespace(Key=Key, Listener=Listener)
    monkeypatch.setattr(tk, "keyboard", ns, raising=False)
    monkeypatch.setattr(tk, "PYNPUT_AVAILABLE", True)
    return ns


def session(twin, device: str):
    """The follower on the twin, bent at `BENT`, with every guard of a real arm but the stall
    stages (a loaded test machine may pause), and LeRobot's `device` built as a run builds it."""
    twin.control("set_joints", q=BENT)
    safety = {**REAL_ARM_SAFETY, "max_step_rad": CAP, "watchdog_s": None, "torque_off_s": None}
    args = task_args({"name": "reach"}, twin.robot(safety=safety), teleop={"type": device})
    robot = make_safe_robot(args)
    (teleop,) = make_teleops(args, robot)
    assert type(teleop).__name__ == "EndEffectorTeleop"  # through IK: the follower takes joint targets
    assert teleop.jacobian is not None  # MuJoCo's analytic Jacobian of the arm, not finite differences
    return robot, teleop


def drive(robot, teleop, script, ticks, every_tick=None):
    """The real-time control loop, a holding policy, `ticks` ticks; after each tick `every_tick()`,
    then `script[tick]()`. Returns, per tick, (the target sent, e-stop latched, stops so far)."""
    seen = []

    def observe(info):
        seen.append((np.asarray(info.applied, np.float64).copy(), robot.estopped, robot.stats.stops))
        if every_tick is not None:
            every_tick()
        if info.tick in script:
            script[info.tick]()

    loop = ControlLoop(
        robot,
        HoldPolicy(robot.spec),
        LoopConfig(episode_ticks=1000, max_steps=ticks, realtime=True, inference="inline", eval_every=0),
        sink=EpisodeLog(),
        teleops=(teleop,),
        observer=observe,
    )
    loop.run()
    return seen, loop


def true_ee(twin) -> np.ndarray:
    """Where the twin's end effector is (m), from its own joint positions."""
    return ArmKinematics()(np.asarray(twin.state()["q"]))


def test_the_gamepad_drives_the_followers_end_effector_up_then_sideways_and_hands_back(twin, pad):
    robot, teleop = session(twin, "gamepad")
    teleop.connect()
    robot.connect()
    marks = {}
    try:
        twin.control("reset_stats")

        def at(name, then):  # note where the arm is (it has settled: the stick was let go 6 ticks ago)
            def act():
                marks[name] = true_ee(twin)
                then()

            return act

        def up():  # RB held, right stick up: LeRobot's delta_z = -axis 3 = +1
            pad.press(INTERVENE)
            pad.axes[3] = -1.0

        def sideways():  # left stick to the left: delta_y = -axis 0 = +1
            pad.axes[0] = -1.0

        def let_go():
            pad.axes[0] = pad.axes[3] = 0.0

        def give_back():
            pad.press(INTERVENE, down=False)

        # from tick 5: 10 ticks up, 6 still, 10 sideways, 6 still (RB held: 1 cm a tick asked), then handed
        # back for 0.8 s
        script = {4: at("start", up), 14: let_go, 20: at("up", sideways), 30: let_go, 36: at("side", give_back)}
        _, loop = drive(robot, teleop, script, 60)
        end = true_ee(twin)
        moved_up, moved_side = marks["up"] - marks["start"], marks["side"] - marks["up"]
        assert moved_up[2] > 0.07 and np.abs(moved_up[:2]).max() < 0.1 * moved_up[2], moved_up
        assert moved_side[1] > 0.07 and np.abs(moved_side[[0, 2]]).max() < 0.1 * moved_side[1], moved_side
        assert np.linalg.norm(end - marks["side"]) < 0.01, (end, marks["side"])  # handed back: it stays there
        assert loop.operators.takeovers == 1 and loop.operators.active is None
        # taking over, driving and handing back: no jump at the servos
        steps = np.asarray(twin.state()["max_goal_step"])
        assert steps.max() <= CAP + TICK, steps
        assert not robot.estopped and robot.stats.workspace == 0
    finally:
        teleop.close()
        robot.close()


def assert_stopped_in_tick_13(robot, seen):
    assert not seen[12][1] and seen[12][2] == 0  # not before
    assert seen[13][1] and seen[13][2] == 1, [s[1:] for s in seen]  # latched in the tick that polled it
    assert np.abs(seen[12][0] - seen[11][0]).max() > 0.005  # (it was moving)
    held = np.array([a for a, _, _ in seen[13:]])
    assert np.abs(held - held[0]).max() < 1e-6, held  # held at the stop's target, the operator still asking for up
    assert robot.estopped and robot.stats.stops == 1 and robot.stats.estopped >= 10


def start_up(pad):
    def take():  # RB held, right stick up
        pad.press(INTERVENE)
        pad.axes[3] = -1.0

    return take


def test_the_gamepads_b_button_latches_the_estop_within_the_tick(twin, pad):
    robot, teleop = session(twin, "gamepad")
    teleop.connect()
    robot.connect()
    try:
        seen, _ = drive(
            robot,
            teleop,
            {2: start_up(pad), 12: lambda: pad.press(ESTOP_BUTTON), 13: lambda: pad.press(ESTOP_BUTTON, down=False)},
            25,
        )
        assert_stopped_in_tick_13(robot, seen)
    finally:
        teleop.close()
        robot.close()


def test_a_held_b_button_is_one_stop(twin, pad):
    robot, teleop = session(twin, "gamepad")
    teleop.connect()
    robot.connect()
    try:
        seen, _ = drive(robot, teleop, {2: start_up(pad), 12: lambda: pad.press(ESTOP_BUTTON)}, 25)
        assert_stopped_in_tick_13(robot, seen)
    finally:
        teleop.close()
        robot.close()


class Char:
    """pynput's KeyCode of a character key."""

    def __init__(self, char: str) -> None:
        self.char = char


@pytest.mark.parametrize("how", ["space tapped", "e held"])
def test_the_keyboards_estop_keys_latch_the_estop_within_the_tick(twin, keyboard, how):
    robot, teleop = session(twin, "keyboard_ee")
    device = teleop.device.device  # EndEffectorTeleop -> LeRobotTeleop -> LeRobot's KeyboardEndEffectorTeleop
    assert type(device).__name__ == "KeyboardEndEffectorTeleop"
    device.listener = Listener()  # connected: keys now come from the test, as pynput would send them
    robot.connect()
    held_keys = set()
    try:

        def repeat():  # a held key repeats its press each tick (a desktop's auto-repeat)
            for key in held_keys:
                device._on_press(key)

        def press():
            if how == "space tapped":  # pressed and released within the tick: pynput's two calls
                device._on_press(keyboard.Key.space)
                device._on_release(keyboard.Key.space)
            else:  # pressed, then held down to the end, repeating
                device._on_press(Char("e"))
                held_keys.add(Char("e"))

        seen, _ = drive(
            robot, teleop, {2: lambda: held_keys.add(keyboard.Key.shift_r), 12: press}, 25, every_tick=repeat
        )  # shift_r: LeRobot's delta_z = +1
        assert_stopped_in_tick_13(robot, seen)
    finally:
        robot.close()


def test_lerobots_plain_keyboard_has_the_estop_and_ready_keys_too(keyboard):
    """LeRobot's plain `keyboard` teleop has no events of its own (no get_teleop_events) and, in
    LeRobot 0.6, action features that fail (they name an arm it lacks): it is a keys-only device
    here, the e-stop (space, e) and the scene-reset key (n) read from its listener's queue."""
    from hal.teleop import TeleopEventKind
    from hardware.lerobot_teleop import LeRobotTeleop, make_lerobot_teleop_device

    device = make_lerobot_teleop_device({"type": "keyboard", "id": "k"})
    assert not hasattr(device, "get_teleop_events")
    teleop = LeRobotTeleop(device, kind="keyboard")
    assert teleop.action_dim is None
    device.listener = keyboard.Listener()  # connected (pynput's listener needs a desktop session)
    try:
        assert teleop.events() == []
        device._on_press(types_key(" "))
        assert [e.kind for e in teleop.events()] == [TeleopEventKind.ESTOP]
        device.get_action()  # drains the listener's queue, as each tick does
        device._on_press(types_key("n"))
        assert [e.kind for e in teleop.events()] == [TeleopEventKind.READY]
    finally:
        teleop.close()


def types_key(char: str):
    import types

    return types.SimpleNamespace(char=char)
