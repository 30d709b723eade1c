import numpy as np
import pytest

from hal import RobotSpec, SafeRobot, SpecMismatch
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
    from hal.safety import WorkspaceBox

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
    import time

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
