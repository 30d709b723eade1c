"""LeRobot's own `so101_follower` and `so101_leader` (their calibration, degrees, gripper 0..100,
`max_relative_target`, bus reads and writes) on the servo-bus twin, through our adapter and safety
layer: units, the per-tick cap, the e-stop, the watchdog, faults, and the commands users run."""

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from hal.robot import RobotError, RobotFault
from hal.teleop import Teleop, TeleopEvent, TeleopEventKind, poll_events
from robo_async.launch.tasks import make_safe_robot, task_args
from tests.hardware.conftest import BUS_TIMEOUT_MS

TICK = 2 * np.pi / 4096  # one encoder tick (rad): LeRobot sends goals as whole ticks
EXE = [sys.executable, "-m", "robo_async.cli"]


def _safe(twin, **safety):
    robot = twin.robot(safety={"max_step_rad": 0.05, "watchdog_s": None, "torque_off_s": None, **safety})
    return make_safe_robot(task_args({"name": "reach"}, robot))


def _wait(cond, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_units_both_ways_through_lerobots_follower(twin):
    robot = _safe(twin)
    robot.connect()
    try:
        q = np.array([0.3, -0.2, 0.4, 0.1, -0.5, 0.8])
        twin.control("set_joints", q=q)
        state = robot.get_observation().state
        assert np.allclose(state, q, atol=3 * TICK), (state, q)  # degrees and gripper 0..100 back to rad
        target = q + np.array([0.04, -0.04, 0.04, -0.04, 0.04, -0.04])
        robot.send_action(target.astype(np.float32))
        _wait(lambda: np.allclose(twin.state()["q"], target, atol=0.01), "the arm at the target")
        # the gripper's joint low is LeRobot's 0 (not ~9, which a degrees reading of it would give)
        assert robot.inner._units.to_lerobot(robot.spec.low)["gripper.pos"] == pytest.approx(0.0, abs=1e-6)
    finally:
        robot.close()


def test_an_arm_whose_servos_do_not_match_its_calibration_file_is_refused(twin):
    path = next((twin.root / "calibration" / "follower").glob("*.json"))
    cal = json.loads(path.read_text())
    cal["elbow_flex"]["homing_offset"] += 100
    path.write_text(json.dumps(cal))
    robot = _safe(twin)
    with pytest.raises(RobotError, match="not calibrated.*lerobot-calibrate"):
        robot.connect()


def test_a_full_range_jump_moves_at_most_the_cap_per_tick(twin):
    robot = _safe(twin)
    robot.connect()
    try:
        twin.control("reset_stats")
        far = np.asarray(robot.spec.high) * 0.8
        for k in range(25):
            robot.send_action((far if k % 10 < 5 else -far).astype(np.float32))
            time.sleep(robot.spec.dt)
        seen = np.asarray(twin.state()["max_goal_step"])
        assert seen.max() > 0.04  # it did move, at the cap
        assert seen.max() <= 0.05 + TICK, seen  # measured at the servos
        assert robot.stats.clipped_step > 0
    finally:
        robot.close()


class _StopButton(Teleop):
    """A device whose e-stop is pressed (its one event)."""

    name = "stop-button"
    action_dim = None

    def __init__(self) -> None:
        self.pressed = False

    def connect(self) -> None:
        pass

    def get_action(self):
        return None

    def events(self):
        return [TeleopEvent(TeleopEventKind.ESTOP)] if self.pressed else []

    def close(self) -> None:
        pass


def test_the_estop_stops_the_arm_within_one_tick(twin):
    robot = _safe(twin)
    robot.connect()
    button = _StopButton()
    try:
        far = (np.asarray(robot.spec.high) * 0.8).astype(np.float32)
        for _ in range(10):
            robot.send_action(far)
            time.sleep(robot.spec.dt)
        button.pressed = True
        poll_events([button], robot)  # the tick's poll: latched and the hold sent now
        held = np.asarray(twin.state()["q"])
        writes = twin.state()["goal_writes"]
        for _ in range(10):  # the policy goes on asking for the far target
            robot.send_action(far)
            time.sleep(robot.spec.dt)
        after = twin.state()
        assert robot.estopped and robot.stats.estopped >= 10
        assert np.abs(np.asarray(after["q"]) - held).max() < 0.03, (after["q"], held)  # it stopped there
        assert after["goal_writes"] > writes  # holds were written (not a silent bus)
    finally:
        robot.close()


def test_a_stalled_loop_holds_then_the_torque_goes_off(twin):
    robot = _safe(twin, watchdog_s=0.1, torque_off_s=0.6)
    robot.connect()
    try:
        q = robot.get_observation().state
        for _ in range(3):
            robot.send_action(q)
            time.sleep(robot.spec.dt)
        # the loop stalls: nothing more is sent
        _wait(lambda: robot.stats.watchdog_holds > 0, "a hold by the watchdog")
        assert all(twin.state()["torque"])  # holding, torque still on
        _wait(lambda: not any(twin.state()["torque"]), "torque off at the servos")
        assert robot.stats.torque_offs == 1 and robot.estopped
    finally:
        robot.close()


@pytest.mark.e2e
def test_a_killed_actor_leaves_the_arm_held(twin, tmp_path):
    script = tmp_path / "actor.py"
    script.write_text(
        "\n".join(
            [
                "import time, numpy as np",
                "from robo_async.launch.tasks import make_safe_robot, task_args",
                f"robot = make_safe_robot(task_args({{'name': 'reach'}}, {twin.robot()!r}))",
                "robot.connect()",
                "target = np.array([0.2, -0.15, 0.2, 0.1, 0.0, 0.5], np.float32)",
                "for q in robot.approach(target):",
                "    robot.send_action(q); time.sleep(robot.spec.dt)",
                "print('there', flush=True)",
                "while True:",
                "    robot.send_action(target); time.sleep(robot.spec.dt)",
                "",
            ]
        )
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "there"
        time.sleep(0.3)
        proc.kill()
        proc.wait()
        before = np.asarray(twin.state()["q"])
        time.sleep(0.5)
        after = twin.state()
        assert all(after["torque"])  # the servos keep their last goal
        assert np.abs(np.asarray(after["q"]) - before).max() < 0.01
        assert np.allclose(before, [0.2, -0.15, 0.2, 0.1, 0.0, 0.5], atol=0.02)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_pulled_cable_is_a_robot_error_and_the_arm_comes_back_on_replug(twin):
    robot = _safe(twin)
    robot.connect()
    twin.control("unplug")
    with pytest.raises(RobotError, match="follower.tty"):
        for _ in range(5):
            robot.get_observation()
    robot.close()
    twin.control("replug")
    again = _safe(twin)
    again.connect()
    try:
        assert again.get_observation().state.shape == (6,)
    finally:
        again.close()


def test_an_overloaded_servo_stops_the_arm_with_its_name(twin):
    robot = _safe(twin)
    robot.connect()
    try:
        q = robot.get_observation().state
        twin.control("fault", motor="elbow_flex", kind="overload")
        with pytest.raises(RobotFault, match="elbow_flex.*overload"):
            for _ in range(30):  # read every `health_every` ticks
                robot.send_action(q)
    finally:
        robot.close()


def _cli(args, cwd, timeout=240):
    return subprocess.run([*EXE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def _robot_args(twin, **episode):
    f = twin.info["arms"]["follower"]
    ep = {"seconds": 1.0, "reset": "none", **episode}
    return [
        "robot=so101",
        f"robot.port={f['port']}",
        f"robot.id={f['id']}",
        f"robot.calibration_dir={f['calibration_dir']}",
        f"+robot.bus_timeout_ms={BUS_TIMEOUT_MS}",
        # the torque-off stage is tested on its own; here a loaded machine's pauses must not end the run
        "safety.torque_off_s=120",
        *[f"robot.episode.{k}={v}" for k, v in ep.items()],
    ]


@pytest.mark.e2e
def test_teleop_with_the_leader_far_away_converges_without_a_jump(twin, tmp_path):
    far = [0.6, -0.5, 0.7, 0.4, -0.8, 1.2]
    twin.control("set_joints", role="leader", q=far)
    a = twin.info["arms"]["leader"]
    twin.control("reset_stats")
    res = _cli(
        [
            "teleop",
            f"out={tmp_path / 'demos'}",
            "episodes=2",
            *_robot_args(twin, seconds=1.5),
            "teleop=so101_leader",
            f"teleop.port={a['port']}",
            f"teleop.id={a['id']}",
            f"+teleop.bus_timeout_ms={BUS_TIMEOUT_MS}",
            f"teleop.calibration_dir={a['calibration_dir']}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    state = twin.state()
    assert max(state["max_goal_step"]) <= 0.05 + TICK  # no jump at the takeover
    assert np.allclose(state["q"], far, atol=0.05), state["q"]  # and it got there
    # bc from those demonstrations, evaluated on the twin (the policy shaped for the arm)
    bc = _cli(
        [
            "bc",
            "policy=flow",
            f"policy.bc.from_store={tmp_path / 'demos'}",
            "policy.bc.steps=30",
            "policy.obs_keys=[state]",
            *_robot_args(twin, seconds=1.0),
            "eval_episodes=1",
            f"run_dir={tmp_path / 'bc'}",
        ],
        tmp_path,
    )
    assert bc.returncode == 0, bc.stderr[-3000:]
    result = json.loads((tmp_path / "bc" / "eval.json").read_text())
    assert result["episodes"] == 1 and result["mean_ticks"] == 30, result  # one 1 s episode at 30 Hz on the arm
    assert max(twin.state()["max_goal_step"]) <= 0.05 + TICK


@pytest.mark.e2e
def test_train_then_eval_on_the_twin(twin, tmp_path):
    run = tmp_path / "run"
    res = _cli(
        [
            "train",
            *_robot_args(twin),
            "policy.obs_keys=[state]",
            "budget.env_steps=90",
            "launcher=serial",
            "eval_episodes=0",
            f"run_dir={run}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = _cli(["buffer", "inspect", str(run)], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    online = next(ln.split() for ln in out.stdout.splitlines() if ln.startswith("online"))
    assert int(online[1]) >= 90, out.stdout  # the transitions reached the store
    # the safety layer's figures reach the learner's metrics (and the dashboard) in heartbeats
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [r["safety/max_step_rad"] for r in rows if "safety/max_step_rad" in r]
    assert steps and 0 < max(steps) <= 0.05 + 1e-6, steps
    ev = _cli(["eval", f"checkpoint={run}", "episodes=1"], tmp_path)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert max(twin.state()["max_goal_step"]) <= 0.05 + TICK


@pytest.mark.e2e
def test_a_hil_session_on_the_twin_homes_takes_over_and_stores_corrections(twin, tmp_path):
    """A HIL session on the twin: the leader arm (far from the follower) takes over when the
    button device says so, hands back, labels the episode; between episodes the follower goes
    home along the capped path and waits for the (scripted) scene reset. The buttons
    (`sim_leader buttons_only`) give no joint targets: the correction is the leader arm's."""
    leader_q = [0.5, -0.4, 0.5, 0.3, -0.6, 1.0]
    twin.control("hand", role="leader", q=leader_q)  # a hand holds the leader there
    a = twin.info["arms"]["leader"]
    run = tmp_path / "hil"
    events = "{10: is_intervention, 40: is_intervention, 45: success}"
    twin.control("reset_stats")
    res = _cli(
        [
            "train",
            *_robot_args(twin, seconds=2.0, reset="timer", reset_s=0.3),
            "policy.obs_keys=[state]",
            "budget.env_steps=100",
            "launcher=serial",
            "eval_episodes=0",
            f"run_dir={run}",
            "teleop=so101_leader",
            f"teleop.port={a['port']}",
            f"teleop.id={a['id']}",
            f"teleop.calibration_dir={a['calibration_dir']}",
            f"+teleop.bus_timeout_ms={BUS_TIMEOUT_MS}",
            f"teleop.events_from={{type: sim_leader, buttons_only: true, events: {events}}}",
        ],
        tmp_path,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = _cli(["buffer", "inspect", str(run)], tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    counts = {
        ln.split()[0]: ln.split()[1:]
        for ln in out.stdout.splitlines()
        if ln.split()[:1] in (["online"], ["interventions"])
    }
    assert int(counts["interventions"][0]) >= 20, out.stdout  # the operator's ~30 ticks stored as corrections
    assert counts["online"][2] != "-" and float(counts["online"][2].rstrip("%")) > 0, out.stdout  # the label counted
    assert max(twin.state()["max_goal_step"]) <= 0.05 + TICK  # takeover, hand-back and homing: no jump
    from robo_async.buffer.lmdb_store import PersistentReplayStore

    store = PersistentReplayStore(run / "replay").open(readonly=True)
    try:
        corrections = np.stack([r["action"] for _, r in store.rows("interventions")])
    finally:
        store.close()
    # the corrections are the leader arm's pose (the buttons' device would sway around its home)
    assert np.abs(corrections - leader_q).max(-1).min() < 0.02, corrections[-3:]


@pytest.mark.e2e
def test_a_pulled_cable_mid_run_loses_the_arm_and_the_job_takes_it_back_when_the_port_returns(twin, tmp_path):
    """The arm's port goes away mid-run (the cable): its actor stops (the robot held, closed, its
    lease dropped with the process), the run goes on waiting, and once the port is back the arm's
    actor starts again and the run finishes its budget, nothing acked lost."""
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [
            *EXE,
            "train",
            *_robot_args(twin),
            "policy.obs_keys=[state]",
            "budget.env_steps=240",
            "launcher=local",
            "eval_episodes=0",
            f"run_dir={run}",
            "dashboard.port=null",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait(lambda: proc.poll() is not None or twin.state()["goal_writes"] > 60, "the arm moving", timeout=180)
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        twin.control("unplug")
        events = run / "supervisor.jsonl"
        _wait(lambda: events.exists() and "robot_lost" in events.read_text(), "the arm marked lost", timeout=60)
        assert proc.poll() is None  # the run goes on, waiting for the arm
        twin.control("replug")
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    text = events.read_text()
    assert "robot_back" in text and "restarted" in text, text[-2000:]
    inspect = _cli(["buffer", "inspect", str(run)], tmp_path)
    online = next(ln.split() for ln in inspect.stdout.splitlines() if ln.startswith("online"))
    assert int(online[1]) >= 240, inspect.stdout


def test_a_camera_that_stops_delivering_ends_the_episode_and_the_next_waits_for_it(tmp_path):
    """The follower's front camera is LeRobot's own `zmq` camera on the twin's frames; when the
    frames stop, the episode ends there (truncated, named in the log) with the last frames kept,
    and the next episode starts once the camera delivers again."""
    from policies.scripted import HoldPolicy
    from robo_async.actor.loop import ControlLoop
    from robo_async.actor.loop_config import LoopConfig
    from tests.hardware.conftest import RunningTwin

    t = RunningTwin(tmp_path / "twin", camera=True)
    robot = None
    try:
        robot = make_safe_robot(
            task_args(
                {"name": "reach"},
                t.robot(cameras={"front": t.info["camera"]}, safety={"watchdog_s": None, "torque_off_s": None}),
            )
        )
        robot.connect()
        assert robot.get_observation().images["front"].shape == (96, 96, 3)
        loop = ControlLoop(
            robot,
            HoldPolicy(robot.spec),
            LoopConfig(episode_ticks=45, realtime=True, max_episodes=2, inference="sync", eval_every=0),
        )

        def fault() -> None:
            _wait(lambda: loop.tick >= 10, "the first ticks")
            t.control("camera", on=False)  # the camera hangs
            _wait(lambda: robot.inner.camera_stalls > 0, "the stall seen")
            time.sleep(1.0)
            t.control("camera", on=True)

        import threading

        th = threading.Thread(target=fault)
        th.start()
        result = loop.run()
        th.join()
        first, second = result.episodes[0], result.episodes[1]
        assert first.length < 45  # it ended where the camera stopped, not at its time limit
        assert second.length == 45  # the next one ran whole, with the camera back
        assert robot.inner.camera_stalls > 0
    finally:
        if robot is not None:
            robot.close()
        t.close()


def test_a_real_arm_config_without_a_safety_block_gets_every_guard(twin):
    """`robot.safety` left out: the built-in real-arm defaults (cap, velocity, acceleration, watchdog
    with torque off, the workspace box from the SO arm's kinematics) still apply."""
    from robo_async.launch.tasks import REAL_ARM_SAFETY

    robot = make_safe_robot(task_args({"name": "reach"}, twin.robot()))
    spec = robot.spec
    assert spec.max_step_rad == REAL_ARM_SAFETY["max_step_rad"]
    assert spec.max_velocity_rad_s == REAL_ARM_SAFETY["max_velocity_rad_s"]
    assert spec.max_accel_rad_s2 == REAL_ARM_SAFETY["max_accel_rad_s2"]
    assert robot._watchdog_s == REAL_ARM_SAFETY["watchdog_s"] and robot._torque_off_s == REAL_ARM_SAFETY["torque_off_s"]
    assert robot._workspace is not None
    # the box holds a target that would put the end effector under the table
    robot.connect()
    try:
        q = robot.get_observation().state
        down = q.copy()
        down[1], down[2] = 1.5, 1.5  # shoulder and elbow folded forward and down
        robot._set_last(down)  # as if the arm were already a step from it: only the box can refuse
        robot.send_action(down)
        assert robot.stats.workspace >= 1
    finally:
        robot.close()


def test_a_leader_whose_servos_do_not_match_its_calibration_file_is_refused(twin):
    from robo_async.launch.tasks import make_teleops

    path = next((twin.root / "calibration" / "leader").glob("*.json"))
    cal = json.loads(path.read_text())
    cal["shoulder_pan"]["range_min"] -= 50
    path.write_text(json.dumps(cal))
    args = task_args({"name": "reach"}, twin.robot(), teleop=twin.leader())
    (leader,) = make_teleops(args, make_safe_robot(args))
    with pytest.raises(RobotError, match="teleop .*not calibrated.*lerobot-calibrate --teleop.type=so101_leader"):
        leader.connect()


def test_a_twin_started_again_in_the_same_directory_is_found_by_its_own_description(tmp_path):
    """A twin's `twin.json` names its process; a second twin in the same directory (the first one's
    description left behind, as a killed twin leaves it) is waited for, not mistaken for the first."""
    from tests.hardware.conftest import RunningTwin

    first = RunningTwin(tmp_path / "twin")
    first_info = first.info
    first.proc.kill()  # no clean close: its description stays
    first.proc.wait()
    assert (tmp_path / "twin" / "twin.json").exists()
    second = RunningTwin(tmp_path / "twin")
    try:
        assert second.info["pid"] == second.proc.pid != first_info["pid"]
        assert second.state()["plugged"]  # its control socket answers, its bus answered a ping
    finally:
        second.close()
    assert not (tmp_path / "twin" / "twin.json").exists()  # a clean close takes it away
