"""End-effector teleoperation: LeRobot's `keyboard_ee` (its own class, fed an injected key stream,
as pynput would feed it on a desktop) drives a joint-space arm through inverse kinematics and
gym_hil's end-effector action space, through the one control loop's takeover path."""

import enum
import types

import numpy as np
import pytest

from hal.ee_teleop import EndEffectorDevice, EndEffectorTeleop
from hal.safety import SafeRobot
from policies.scripted import HoldPolicy
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.actor.records import EpisodeLog
from robo_async.launch.tasks import TaskArgs, make_robot, make_teleops


class Key(enum.Enum):
    """pynput's key names (its OS backends need a desktop session, which this machine lacks)."""

    up, down, left, right, shift, shift_r, ctrl_r, ctrl_l, esc = range(9)


class Listener:
    """An alive listener whose key events the test delivers (pynput's place on a desktop)."""

    def is_alive(self):
        return True

    def stop(self):
        pass


@pytest.fixture
def keyboard(monkeypatch):
    import lerobot.teleoperators.keyboard.teleop_keyboard as tk

    ns = types.SimpleNamespace(Key=Key, Listener=Listener)
    monkeypatch.setattr(tk, "keyboard", ns, raising=False)
    monkeypatch.setattr(tk, "PYNPUT_AVAILABLE", True)
    return ns


def session(task: TaskArgs):
    robot = SafeRobot(make_robot(task))
    (teleop,) = make_teleops(TaskArgs(task.name, task.options, teleop={"type": "keyboard_ee"}), robot)
    device = teleop.device.device  # EndEffectorTeleop -> LeRobotTeleop -> LeRobot's KeyboardEndEffectorTeleop
    assert type(device).__name__ == "KeyboardEndEffectorTeleop"
    device.listener = Listener()  # connected: keys now come from the test
    robot.connect()
    return robot, teleop, device


def run_with_keys(robot, teleop, device, script, ticks, episode_ticks=200):
    """The control loop with a holding policy; `script[tick]` = (press or release, key) after that
    tick; a pressed key repeats its press every tick until released (a desktop's auto-repeat)."""
    applied, held = [], set()

    def observe(info):
        applied.append(np.asarray(info.applied, np.float64).copy())
        for action, key in script.get(info.tick, ()):
            (held.add if action == "press" else held.discard)(key)
            if action == "release":
                device._on_release(key)
        for key in held:
            device._on_press(key)

    sink = EpisodeLog()
    loop = ControlLoop(
        robot,
        HoldPolicy(robot.spec),
        LoopConfig(episode_ticks=episode_ticks, max_steps=ticks, inference="inline", eval_every=0),
        sink=sink,
        teleops=(teleop,),
        observer=observe,
    )
    loop.run()
    return np.asarray(applied), loop


def test_keyboard_ee_moves_a_joint_space_arm_through_ik_and_hands_back_without_a_jump(keyboard):
    robot, teleop, device = session(TaskArgs("pick_lift", {}))
    inner = robot.inner
    try:
        robot.reset(seed=0)
        # hold 5 ticks, then the left arrow (LeRobot's delta_x = +1) for 20, released, 10 more held
        script = {4: [("press", keyboard.Key.left)], 24: [("release", keyboard.Key.left)]}
        start = inner.ee_position(robot.get_observation().state[:6])
        applied, loop = run_with_keys(robot, teleop, device, script, 35)
        moved = inner.ee_position(applied[24].astype(np.float32)) - start
        assert moved[0] > 0.1 and abs(moved[1]) < 0.02 and abs(moved[2]) < 0.02, moved  # +x, 20 ticks x 1 cm
        steps = np.abs(np.diff(applied, axis=0)).max(axis=1)
        # taking over, driving and handing back: no joint moves more than the IK's cap in one tick,
        # so the safety layer never had to clip
        assert steps.max() <= teleop.max_joint_step + 1e-5, steps.max()
        assert robot.stats.clipped == 0
        left = inner.ee_position(applied[25].astype(np.float32))  # handed back: the policy holds about there
        assert np.linalg.norm(inner.ee_position(applied[-1].astype(np.float32)) - left) < 0.02
        assert loop.operators is not None
    finally:
        robot.close()


def test_keyboard_ee_gripper_and_labels_on_the_arm(keyboard):
    robot, teleop, device = session(TaskArgs("pick_lift", {}))
    try:
        robot.reset(seed=0)
        g = robot.spec.action_dim - 1
        open_q = robot.get_observation().state[g]
        # left ctrl is LeRobot's "close" (0): the gripper moves toward its lower limit, 0.2 rad a tick
        script = {
            2: [("press", keyboard.Key.ctrl_l)],
            6: [("release", keyboard.Key.ctrl_l), ("press", "s")],
            7: [("release", "s")],
        }
        applied, loop = run_with_keys(robot, teleop, device, script, 12)
        assert applied[6][g] == pytest.approx(max(robot.spec.low[g], open_q - 4 * 0.2), abs=1e-4)
        assert loop.episodes >= 1  # 's' labelled the episode a success and ended it
    finally:
        robot.close()


def test_keyboard_ee_drives_gym_hil_in_its_own_action_space(keyboard):
    robot, teleop, device = session(TaskArgs("gym_hil", {}))
    try:
        obs = robot.reset(seed=0)
        tcp0 = obs.state[-3:].copy()
        script = {
            1: [("press", keyboard.Key.shift_r)],
            9: [("release", keyboard.Key.shift_r)],  # delta_z = +1
            10: [("press", keyboard.Key.ctrl_l)],
            12: [("release", keyboard.Key.ctrl_l)],
        }  # LeRobot's close
        applied, _ = run_with_keys(robot, teleop, device, script, 15)
        assert applied[5].tolist() == [0.0, 0.0, 1.0, 1.0]  # up, gripper stays (gym_hil's 1)
        assert applied[12].tolist() == [0.0, 0.0, 0.0, 2.0]  # close is gym_hil's 2
        assert robot.get_observation().state[-1] - tcp0[2] > 0.05  # the pinch point rose
        assert applied[-1].tolist() == [0.0, 0.0, 0.0, 1.0]  # handed back to the hold action
    finally:
        robot.close()


def test_an_ee_device_on_an_arm_without_kinematics_is_refused_in_one_line():
    from hal.ee_teleop import EndEffectorTeleop
    from hal.robot import RobotError
    from sim import GymConfig, GymRobot

    class Dev:
        name = "keyboard_ee"

    with pytest.raises(RobotError, match="takes joint targets and has no forward kinematics"):
        EndEffectorTeleop(Dev(), make_robot(TaskArgs("reach", {})).spec)
    with pytest.raises(RobotError, match=r"gives \[dx, dy, dz, grip\]; gym_Pendulum-v1 takes 1 actions"):
        from hal.ee_teleop import EndEffectorSpace

        EndEffectorTeleop(Dev(), GymRobot(GymConfig()).spec, ee_space=EndEffectorSpace())


def test_each_takeover_starts_from_where_the_robot_is():
    from hal.ee_teleop import EndEffectorDevice, EndEffectorTeleop
    from hal.teleop import TeleopEvent, TeleopEventKind

    class Script(EndEffectorDevice):
        name = "script"
        queued: list = []

        def connect(self):
            pass

        def close(self):
            pass

        def events(self):
            out, self.queued = [TeleopEvent(k) for k in self.queued], []
            return out

        def get_ee(self):
            return np.array([1.0, 0.0, 0.0, 1.0], np.float32)

    robot = make_robot(TaskArgs("reach", {}))
    robot.connect()
    try:
        dev = Script()
        t = EndEffectorTeleop(dev, robot.spec, fk=robot.ee_position)
        a = np.zeros(6, np.float32)
        b = np.full(6, 0.3, np.float32)
        for state, expect in ((a, a), (b, b)):  # two takeovers, the robot moved in between
            dev.queued = [TeleopEventKind.INTERVENTION_ON]
            t.observe({"state": state}, False)
            t.events()
            got = t.get_action()
            assert np.abs(got - expect).max() <= t.max_joint_step + 1e-6  # one IK step from here
            dev.queued = [TeleopEventKind.INTERVENTION_OFF]
            t.events()
    finally:
        robot.close()


def test_keyboard_ee_on_the_sim_so101_twin_through_lerobots_robot_class(keyboard):
    robot, teleop, device = session(TaskArgs("reach", {}, robot={"type": "sim_so101", "id": "ee"}))
    try:
        robot.reset(seed=0)
        fk = robot.inner.ee_position  # the twin's kinematics, in the adapter's units (rad)
        start = fk(robot.get_observation().state[:6])
        script = {2: [("press", keyboard.Key.shift_r)], 14: [("release", keyboard.Key.shift_r)]}  # delta_z = +1
        applied, _ = run_with_keys(robot, teleop, device, script, 16)
        rose = fk(applied[14].astype(np.float32)) - start
        assert rose[2] > 0.06 and np.abs(rose[:2]).max() < 0.02, rose
        assert np.abs(np.diff(applied, axis=0)).max() <= teleop.max_joint_step + 1e-5
    finally:
        robot.close()


def test_an_ee_device_on_a_robot_without_kinematics_gives_events_only(keyboard):
    robot = SafeRobot(make_robot(TaskArgs("gym", {})))
    (teleop,) = make_teleops(TaskArgs("gym", {}, teleop={"type": "keyboard_ee"}), robot)
    assert type(teleop).__name__ == "LeRobotTeleop" and teleop.action_dim is None  # labels, no takeover


BENT = np.array([0.0, 0.3, 1.2, 1.2, 0.0, 0.5])  # rad: the SO-101's end effector ~(0.22, 0, 0.10) m


def test_the_arms_analytic_jacobian_matches_finite_differences_on_random_poses():
    from hardware.lerobot_adapter import SO_ARM_LIMITS, ArmKinematics
    from sim.sim_robot import ee_fk, ee_jacobian

    kin = ArmKinematics()
    robot = make_robot(TaskArgs("pick_lift", {}))  # a sim scene: the arm's hinges, then a free cube
    robot.connect()
    try:
        import mujoco

        scene, scratch = robot.task.model, mujoco.MjData(robot.task.model)
        rng = np.random.default_rng(0)
        low, high = (np.asarray(x) for x in SO_ARM_LIMITS)
        eps = 1e-6
        for _ in range(50):
            q = rng.uniform(low, high)
            jac = kin.jacobian(q)
            assert jac.shape == (3, 6)
            fd = np.stack([(kin(q + eps * e) - kin(q - eps * e)) / (2 * eps) for e in np.eye(6)], axis=1)
            np.testing.assert_allclose(jac, fd, rtol=0, atol=1e-8)  # m/rad; columns reach ~0.4
            assert not np.any(jac[:, 5])  # the gripper does not move the end effector (a site on the hand)
            fd = np.stack(
                [
                    (ee_fk(scene, scratch, q + eps * e) - ee_fk(scene, scratch, q - eps * e)) / (2 * eps)
                    for e in np.eye(6)
                ],
                axis=1,
            )
            np.testing.assert_allclose(ee_jacobian(scene, scratch, q), fd, rtol=0, atol=1e-8)
    finally:
        robot.close()


class _Steady(EndEffectorDevice):
    """Always the same end-effector command."""

    name = "steady"

    def __init__(self, ee):
        self.ee = np.asarray(ee, np.float32)

    def connect(self):
        pass

    def close(self):
        pass

    def events(self):
        return []

    def get_ee(self):
        return self.ee


class _Counted:
    """The arm's kinematics, counting forward-kinematics calls."""

    def __init__(self, jacobian=True):
        from hardware.lerobot_adapter import ArmKinematics

        self.kin, self.calls = ArmKinematics(), 0
        if jacobian:
            self.jacobian = self.kin.jacobian

    def __call__(self, q):
        self.calls += 1
        return self.kin(q)


@pytest.mark.parametrize("direction", [(1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1), (1, 1, 1)])
def test_ik_on_the_arms_jacobian_moves_the_end_effector_along_the_commanded_line(direction):
    spec = make_robot(TaskArgs("reach", {})).spec  # the SO-101's joints, the gripper last
    u = np.asarray(direction, float) / np.linalg.norm(direction)
    paths = {}
    for analytic in (True, False):
        fk = _Counted(jacobian=analytic)
        teleop = EndEffectorTeleop(_Steady([*direction, 1.0]), spec, fk=fk)
        assert (teleop.jacobian is not None) == analytic
        teleop.observe({"state": BENT.astype(np.float32)}, False)
        paths[analytic] = [teleop.get_action().astype(np.float64) for _ in range(10)]
        # one forward kinematics a tick (the goal's error); the Jacobian is MuJoCo's, not 5 more for differences
        assert fk.calls == (10 if analytic else 60)
        moved = [fk.kin(q) - fk.kin(BENT) for q in paths[analytic]]
        along, asked = float(moved[-1] @ u), 10 * 0.01 * np.linalg.norm(direction)  # 10 ticks x 1 cm per axis
        assert 0.07 < along < 1.02 * asked, moved[-1]  # (less where a joint is at its cap)
        off = max(np.linalg.norm(m - (m @ u) * u) for m in moved)
        assert off < 0.0015, off  # on the line all the way (summed open-loop steps drift 2.5-6 mm here)
        steps = np.abs(np.diff([BENT, *paths[analytic]], axis=0))
        assert steps.max() <= teleop.max_joint_step + 1e-6 and not np.any(steps[:, 5])  # the gripper stays
    # finite differences (any robot with forward kinematics) agree with the analytic Jacobian
    np.testing.assert_allclose(paths[True], paths[False], atol=1e-3)
