import time

import numpy as np
import pytest

from hal import RobotSpec, SafeRobot, SpecMismatch
from hal.robot import Robot, RobotError
from hal.spec import Observation
from sim import ReachTask, SimRobot


@pytest.fixture
def robot():
    r = SafeRobot(SimRobot(ReachTask()))
    r.connect()
    r.reset(seed=0)
    yield r
    r.close()


def test_nan_action_holds_position(robot):
    before = robot.get_observation().state.copy()
    applied = robot.send_action(np.array([np.nan, 0, 0, 0, 0, 0], dtype=np.float32))
    assert np.all(np.isfinite(applied))
    np.testing.assert_allclose(applied, before, atol=1e-6)
    assert robot.stats.rejected == 1


def test_wrong_shape_is_rejected(robot):
    applied = robot.send_action(np.zeros(5, dtype=np.float32))
    assert applied.shape == (6,)
    assert robot.stats.rejected == 1


def test_adversarial_actions_never_leave_limits(robot):
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = rng.normal(0, 100, size=6).astype(np.float32)
        a[rng.integers(0, 6)] = rng.choice([np.inf, -np.inf, np.nan, 1e9])
        applied = robot.send_action(a)
        assert np.all(applied >= robot.spec.low) and np.all(applied <= robot.spec.high)


def limited_robot(max_step):
    """A reach arm whose spec limits the change per tick to `max_step` rad."""
    base = ReachTask().spec()
    spec = RobotSpec(base.name, base.joint_names, base.joint_low, base.joint_high, base.hz, max_step_rad=max_step)

    class Limited(SimRobot):
        @property
        def spec(self):
            return spec

    return SafeRobot(Limited(ReachTask())), spec


def test_max_step_per_tick():
    r, spec = limited_robot(0.05)
    r.connect()
    try:
        start = r.reset(seed=0).state
        applied = r.send_action(start + 1.0)
        np.testing.assert_allclose(applied, np.clip(start + 0.05, spec.low, spec.high), atol=1e-6)
    finally:
        r.close()


def test_spec_check_action_message():
    spec = ReachTask().spec()
    with pytest.raises(SpecMismatch, match=r"action has shape \(5,\), robot sim_so101_reach expects \(6,\)"):
        spec.check_action(np.zeros(5))


def test_workspace_box_holds_targets_outside(robot):
    from hal.workspace import WorkspaceBox

    sim = robot.inner
    here = sim.ee_position(robot.get_observation().state)
    box = WorkspaceBox(sim.ee_position, tuple(here - 0.05), tuple(here + 0.05))
    guarded = SafeRobot(sim, workspace=box)
    before = guarded.reset(seed=0).state.copy()
    applied = guarded.send_action(before + np.array([1.0, -1.0, 1.0, 0, 0, 0], np.float32))
    np.testing.assert_allclose(applied, before, atol=1e-6)
    assert guarded.stats.workspace == 1
    small = guarded.send_action(before + 0.001)
    assert guarded.stats.workspace == 1 and not np.allclose(small, before)


def test_estop_latches_until_cleared(robot):
    before = robot.get_observation().state.copy()
    robot.estop("operator pressed the button")
    for _ in range(3):
        np.testing.assert_allclose(robot.send_action(before + 0.3), before, atol=1e-5)
    assert robot.stats.estopped == 3 and robot.estopped
    robot.clear_estop()
    assert not np.allclose(robot.send_action(before + 0.01), before, atol=1e-4)


def test_watchdog_holds_when_the_loop_goes_quiet():
    r = SafeRobot(SimRobot(ReachTask()), watchdog_s=0.05)
    r.connect()
    r.reset(seed=0)
    deadline = time.monotonic() + 10
    while r.stats.watchdog_holds < 2 and time.monotonic() < deadline:
        time.sleep(0.01)  # the control loop sends nothing
    assert r.stats.watchdog_holds >= 2
    r.close()


@pytest.mark.parametrize("max_step", [0.05, float("inf")])
def test_filter_matches_the_numpy_reference_bit_for_bit(max_step):
    """The per-tick filter runs on Python floats for speed; it must give exactly what float32
    numpy clipping gives (limits and the per-tick step; the upper bound wins where they cross),
    including from a last target outside the limits."""
    r, spec = limited_robot(max_step)
    r.connect()
    try:
        rng = np.random.default_rng(1)
        r.reset(seed=0)
        clipped = 0
        for i in range(500):
            last = rng.uniform(spec.low - 0.2, spec.high + 0.2).astype(np.float32)
            r._set_last(last)
            a = (last + rng.normal(0, 0.1 if i % 2 else 2.0, 6)).astype(np.float32)
            step = np.float32(max_step)
            if np.isfinite(step):
                want = np.minimum(np.maximum(a, np.maximum(spec.low, last - step)), np.minimum(spec.high, last + step))
            else:
                want = np.minimum(np.maximum(a, spec.low), spec.high)
            got = r.filter(a)
            assert got.dtype == np.float32 and got.tobytes() == want.tobytes(), (a, last, got, want)
            clipped += bool(np.any(want != a))
        assert r.stats.clipped == clipped > 0
    finally:
        r.close()


# --- motion limits, watchdog, stop and approach, on a tiny in-test arm -----------------------------

HZ = 30.0  # dt = 1/30 s: 0.6 rad/s is 0.02 rad a tick, 9 rad/s^2 is 0.01 rad a tick per tick
TOL = 1e-6  # float32 targets around 1 rad


class Arm(Robot):
    """A perfect position-controlled arm: it is where it was last told to be, or where a test puts
    it (`q`); it records what it was sent and how often its torque was turned off."""

    def __init__(self, spec):
        self._spec, self.q, self.sent, self.torque_offs = spec, np.zeros(spec.action_dim, np.float32), [], 0

    @property
    def spec(self):
        return self._spec

    def connect(self):
        pass

    def close(self):
        pass

    def get_observation(self):
        return Observation(time.monotonic(), self.q.copy())

    def send_action(self, action):
        a = self._spec.check_action(action)
        assert np.all(a >= self._spec.low) and np.all(a <= self._spec.high)
        self.sent.append(a.copy())
        self.q = a.copy()
        return a.copy()

    def disable_torque(self):
        self.torque_offs += 1


def arm(**kw):
    """A SafeRobot around a 3-joint Arm with limits +-2 rad at HZ, reset at 0 rad; `max_*` keywords
    go to the spec, the others to SafeRobot."""
    limits = {k: kw.pop(k) for k in list(kw) if k.startswith("max_")}
    r = SafeRobot(Arm(RobotSpec("arm", ("a", "b", "c"), (-2.0,) * 3, (2.0,) * 3, HZ, **limits)), **kw)
    r.reset()
    return r


def drive(r, target, ticks):
    """Send `target` for `ticks` ticks; the targets applied, with the start first."""
    out = [r.inner.q.copy()]
    for _ in range(ticks):
        out.append(r.send_action(np.asarray(target, np.float32)))
    return np.array(out)


def test_a_full_range_jump_moves_at_most_the_step_cap_per_tick():
    r = arm(max_step_rad=0.05)
    r.inner.q = np.full(3, -2.0, np.float32)  # at the low limit
    r.reset()
    path = drive(r, np.full(3, 2.0), 100)  # the high limit, 4 rad away
    steps = np.abs(np.diff(path, axis=0))
    assert steps.max() <= 0.05 + TOL and np.allclose(path[-1], 2.0)
    assert r.stats.clipped_step == r.stats.clipped > 70 and r.stats.clipped_velocity == r.stats.clipped_accel == 0
    assert 0.05 - TOL <= r.stats.max_step_seen <= 0.05 + TOL


def test_the_velocity_limit_caps_the_step_with_max_step():
    r = arm(max_step_rad=0.05, max_velocity_rad_s=(0.6, 3.0, 0.3))  # per joint: 0.02, 0.1 -> 0.05, 0.01 a tick
    steps = np.abs(np.diff(drive(r, np.ones(3), 5), axis=0))
    np.testing.assert_allclose(steps, np.tile([0.02, 0.05, 0.01], (5, 1)), atol=TOL)
    assert r.stats.clipped_velocity == r.stats.clipped_step == r.stats.clipped == 5


def test_the_accel_limit_ramps_up_a_far_target():
    r = arm(max_step_rad=0.05, max_accel_rad_s2=9.0)  # the change grows by 0.01 a tick up to 0.05
    path = drive(r, [1.5, -1.5, 0.0], 60)
    steps = np.diff(path, axis=0)
    np.testing.assert_allclose(steps[:6, 0], [0.01, 0.02, 0.03, 0.04, 0.05, 0.05], atol=TOL)
    np.testing.assert_allclose(steps[:6, 1], [-0.01, -0.02, -0.03, -0.04, -0.05, -0.05], atol=TOL)
    growth = np.abs(steps[1:]) - np.abs(steps[:-1])
    assert growth.max() <= 0.01 + TOL
    np.testing.assert_allclose(path[-1], [1.5, -1.5, 0.0], atol=TOL)  # reached, not overshot
    assert np.all(path[:, 0] <= 1.5 + TOL) and np.all(path[:, 1] >= -1.5 - TOL)
    assert r.stats.clipped_accel == 4 and r.stats.clipped_step > 20 and r.stats.clipped_position == 0


def test_slowing_down_and_stopping_are_not_limited():
    r = arm(max_step_rad=0.05, max_accel_rad_s2=9.0)
    moving = drive(r, np.ones(3), 8)[-1]  # at full speed, 0.05 a tick
    clipped = r.stats.clipped
    np.testing.assert_array_equal(r.send_action(moving), moving)  # stop at once
    np.testing.assert_array_equal(r.send_action(moving + 0.005), moving + 0.005)  # creep on: in the ramp
    assert r.stats.clipped == clipped
    back = r.send_action(moving - 1.0)  # reverse: from standstill, so the ramp starts again
    np.testing.assert_allclose(back - (moving + 0.005), -0.01, atol=TOL)
    assert r.stats.clipped_accel >= 1


def test_after_a_hold_the_ramp_starts_again_from_standstill():
    clock = FakeClock()
    r = arm(max_step_rad=0.05, max_accel_rad_s2=9.0, watchdog_s=0.1, clock=clock)
    for hold in (
        lambda: r.send_action(np.full(3, np.nan, np.float32)),  # rejected: held
        lambda: (setattr(clock, "t", clock.t + 1), r.check_watchdog()),
    ):  # the watchdog's hold
        at = drive(r, np.ones(3), 6)[-1]  # at full speed
        hold()
        np.testing.assert_allclose(r.send_action(np.full(3, 2.0, np.float32)) - at, 0.01, atol=TOL)
        drive(r, -np.ones(3), 30)  # back


def test_the_accel_filter_matches_a_numpy_reference():
    r = arm(max_step_rad=0.05, max_velocity_rad_s=(0.6, 3.0, 3.0), max_accel_rad_s2=(9.0, 3.0, 1e9))
    spec, rng = r.spec, np.random.default_rng(2)
    cap = np.array([0.02, 0.05, 0.05])
    acc = np.array([9.0, 3.0, 1e9]) / HZ**2
    for i in range(300):
        last = rng.uniform(-1.9, 1.9, 3).astype(np.float32)
        prev = rng.uniform(-0.06, 0.06, 3)
        r._set_last(last)
        r._prev_l = prev.tolist()
        a = (last + rng.normal(0, 0.05 if i % 2 else 1.0, 3)).astype(np.float32)
        lo = np.maximum(spec.low, last + np.maximum(np.minimum(prev, 0) - acc, -cap))
        hi = np.minimum(spec.high, last + np.minimum(np.maximum(prev, 0) + acc, cap))
        np.testing.assert_allclose(r.filter(a), np.minimum(np.maximum(a, lo), hi), atol=TOL)


def test_clips_are_counted_by_the_limit_that_set_them():
    r = arm(max_step_rad=0.05)
    r.send_action(np.array([3.0, 0.0, 0.0], np.float32))  # the step cap: 0.05 toward 3
    r._set_last(np.array([1.99, 0.0, 0.0], np.float32))
    r.send_action(np.array([3.0, 0.0, 0.0], np.float32))  # the joint limit: 2.0
    assert (r.stats.clipped, r.stats.clipped_step, r.stats.clipped_position) == (2, 1, 1)
    names = r.stats_dict()
    assert names["safety/clipped"] == 2 and names["safety/clipped_position"] == 1
    assert {
        "safety/rejected",
        "safety/workspace",
        "safety/estopped",
        "safety/watchdog_holds",
        "safety/torque_offs",
        "safety/stops",
        "safety/max_step_seen",
    } <= set(names)


def test_infinite_limits_pass_any_target_within_the_joint_limits():
    r = arm()
    far = np.array([1.9, -1.9, 0.5], np.float32)
    np.testing.assert_array_equal(r.send_action(far), far)
    assert r.stats.clipped == 0 and abs(r.stats.max_step_seen - 1.9) < TOL


def test_spec_motion_limits_are_checked():
    base = dict(name="x", joint_names=("a", "b"), joint_low=(-1.0, -1.0), joint_high=(1.0, 1.0), hz=10.0)
    assert RobotSpec(**base, max_velocity_rad_s=[1.0, 2.0]).velocity_limits() == (1.0, 2.0)  # a YAML list
    assert RobotSpec(**base, max_accel_rad_s2=5).accel_limits() == (5.0, 5.0)
    with pytest.raises(SpecMismatch, match="max_velocity_rad_s has 3 values for 2 joints"):
        RobotSpec(**base, max_velocity_rad_s=(1.0, 1.0, 1.0))
    for bad in (0.0, -1.0, float("nan"), (1.0, 0.0)):
        with pytest.raises(SpecMismatch, match="max_accel_rad_s2 must be positive"):
            RobotSpec(**base, max_accel_rad_s2=bad)


class FakeClock:
    """Seconds that move only when a test moves them."""

    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_the_watchdog_holds_then_turns_the_torque_off_and_latches():
    clock = FakeClock()
    r = arm(max_step_rad=0.05, watchdog_s=0.1, torque_off_s=1.0, clock=clock)  # not connected: no thread
    target = r.send_action(np.full(3, 0.5, np.float32))  # 0.05 on the way there
    sent = len(r.inner.sent)
    clock.t += 0.05
    r.check_watchdog()
    assert r.stats.watchdog_holds == 0
    for k in range(1, 5):  # every watchdog_s without a command: re-command the last target
        clock.t += 0.15
        r.check_watchdog()
        assert r.stats.watchdog_holds == k
    assert len(r.inner.sent) == sent + 4 and all(np.array_equal(a, target) for a in r.inner.sent[sent:])
    assert r.inner.torque_offs == 0 and not r.estopped
    clock.t += 0.5  # 1.1 s without an action
    r.check_watchdog()
    assert r.inner.torque_offs == r.stats.torque_offs == 1 and r.estopped
    assert r._estop.startswith("watchdog: no action for 1.1")
    clock.t += 5
    r.check_watchdog()
    sent = len(r.inner.sent)
    np.testing.assert_array_equal(r.send_action(np.full(3, 0.9, np.float32)), target)  # held, not sent
    assert len(r.inner.sent) == sent and r.inner.torque_offs == 1 and r.stats.watchdog_holds == 4
    r.inner.q = np.full(3, -0.3, np.float32)  # the arm sagged while its torque was off
    r.clear_estop()
    np.testing.assert_allclose(r.send_action(np.full(3, 0.5, np.float32)), -0.25, atol=TOL)  # from where it is
    assert len(r.inner.sent) == sent + 1


def test_actions_keep_the_watchdog_quiet():
    clock = FakeClock()
    r = arm(watchdog_s=0.1, torque_off_s=0.3, clock=clock)
    for _ in range(20):
        clock.t += 0.09
        r.send_action(np.zeros(3, np.float32))
        r.check_watchdog()
    assert r.stats.watchdog_holds == r.stats.torque_offs == 0 and not r.estopped


def test_the_watchdog_thread_turns_the_torque_off_when_nothing_arrives():
    r = arm(watchdog_s=0.02, torque_off_s=0.1)
    r.connect()
    try:
        deadline = time.monotonic() + 10
        while r.stats.torque_offs == 0 and time.monotonic() < deadline:
            time.sleep(0.01)  # the control loop sends nothing
        time.sleep(0.05)
        assert r.stats.torque_offs == r.inner.torque_offs == 1 and r.stats.watchdog_holds >= 1 and r.estopped
    finally:
        r.close()


def test_torque_off_needs_a_shorter_watchdog():
    with pytest.raises(ValueError, match="torque_off_s"):
        arm(watchdog_s=1.0, torque_off_s=0.5)
    with pytest.raises(ValueError, match="torque_off_s"):
        arm(torque_off_s=0.5)


def test_stop_holds_the_measured_position_at_once():
    r = arm(max_step_rad=0.05)
    drive(r, np.ones(3), 3)
    r.inner.q = np.full(3, 0.12, np.float32)  # the arm lags its target (0.15)
    sent = len(r.inner.sent)
    np.testing.assert_array_equal(r.stop("operator"), np.full(3, 0.12, np.float32))
    assert len(r.inner.sent) == sent + 1 and np.array_equal(r.inner.sent[-1], np.full(3, 0.12, np.float32))
    assert r.estopped and r.stats.stops == 1
    np.testing.assert_array_equal(r.send_action(np.ones(3, np.float32)), np.full(3, 0.12, np.float32))


def test_approach_reaches_the_target_within_every_limit():
    r = arm(max_step_rad=0.05, max_velocity_rad_s=(0.6, 3.0, 3.0), max_accel_rad_s2=9.0)
    home = np.array([1.0, -1.5, 0.003], np.float32)
    path = [r.inner.q.copy()]
    for q in r.approach(home):
        path.append(r.send_action(q))
        assert np.array_equal(path[-1], q)
    path = np.array(path)
    np.testing.assert_array_equal(path[-1], home)
    steps = np.diff(path, axis=0)
    assert np.all(np.abs(steps) <= [0.02 + TOL, 0.05 + TOL, 0.05 + TOL])
    assert np.abs(np.diff(steps, axis=0)).max() <= 0.01 + TOL  # ramps up and down, never a jolt
    assert np.all(path[:, 0] <= 1.0) and np.all(path[:, 1] >= -1.5)  # never past home
    assert r.stats.clipped == 0 and len(path) < 60 + 8
    assert list(r.approach(home)) == []


def test_approach_without_limits_is_one_tick_and_stops_at_an_estop():
    r = arm()
    assert len(list(r.approach(np.ones(3, np.float32)))) == 1
    r = arm(max_step_rad=0.05)
    path = r.approach(np.ones(3, np.float32))
    r.send_action(next(path))
    r.estop("operator")
    with pytest.raises(RobotError, match="e-stop latched"):
        next(path)
