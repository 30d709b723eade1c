"""A learned reward on a real arm's software stack: a success classifier trained on the twin's
camera frames (read through LeRobot's own `zmq` camera on `so101_follower`) is the reward of a HIL
session on the twin, the leader arm taking over (buttons beside it) and the classifier ending each
episode where the arm reaches the goal pose."""

import subprocess
import sys
import time

import numpy as np
import pytest

from hardware.twin.server import camera_override
from tests.hardware.conftest import BUS_TIMEOUT_MS, RunningTwin

GOAL = np.array([1.2, -0.3, 0.4, 0.3, 0.0, 0.5])  # the pose the classifier calls success (rad)


def _frame_after(robot, previous):
    """The front camera's next frame that differs from `previous` (the arm was just placed)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        frame = robot.get_observation().images["front"]
        if previous is None or not np.array_equal(frame, previous):
            return frame
        time.sleep(0.02)
    raise AssertionError("the twin's camera delivered no new frame in 60 s")


def _classifier(twin, out):
    """Frames of the twin's follower at the goal (successes), at home and on the way (failures),
    read as a run reads them; a classifier trained on them by `robo-async reward train`'s code."""
    from robo_async.commands.reward import train_classifier
    from robo_async.launch.tasks import make_safe_robot, task_args

    robot = make_safe_robot(
        task_args(
            {"name": "reach"},
            twin.robot(cameras={"front": twin.info["camera"]}, safety={"watchdog_s": None, "torque_off_s": None}),
        )
    )
    robot.connect()
    rng = np.random.default_rng(0)
    frames, labels, last = [], [], None
    try:
        for k in range(80):
            if k % 2 == 0:
                q, success = GOAL + rng.uniform(-0.1, 0.1, 6), True
            elif k % 4 == 1:
                q, success = rng.uniform(-0.1, 0.1, 6), False  # home
            else:  # on the way, as the capped path goes: every joint moved by at most s (the near ones are there)
                s = rng.uniform(0, 0.6)
                q, success = np.clip(GOAL, -s, s) + rng.uniform(-0.05, 0.05, 6), False
            twin.control("set_joints", role="follower", q=q.tolist())
            last = _frame_after(robot, last)
            frames.append(last[None])
            labels.append(success)
    finally:
        robot.close()
    clf = train_classifier(np.stack(frames), np.array(labels), np.arange(len(labels)), ("front",), updates=300)
    return clf.save(out)


@pytest.mark.timeout(400)
@pytest.mark.e2e
def test_the_reward_classifier_is_the_reward_of_a_hil_session_on_the_twin(tmp_path):
    """The operator's buttons hand control to the leader arm (held at the goal by a hand) at tick 3
    and never hand back; nobody labels success: each episode ends where the classifier, on the
    frames LeRobot's camera returned, sees the follower at the goal (reward 1, terminated), the
    follower then goes home along the capped path and the next episode starts. Break-checked:
    without `reward_classifier=` no row has a reward."""
    from robo_async.buffer.lmdb_store import PersistentReplayStore

    twin = RunningTwin(tmp_path / "twin", camera=True)
    try:
        clf = _classifier(twin, tmp_path / "classifier")
        twin.control("set_joints", role="follower", q=[0.0] * 6)
        twin.control("hand", role="leader", q=GOAL.tolist())
        f, a = twin.info["arms"]["follower"], twin.info["arms"]["leader"]
        run = tmp_path / "hil"
        res = subprocess.run(
            [
                sys.executable,
                "-m",
                "robo_async.cli",
                "train",
                "robot=so101",
                f"robot.port={f['port']}",
                f"robot.id={f['id']}",
                f"robot.calibration_dir={f['calibration_dir']}",
                f"+robot.bus_timeout_ms={BUS_TIMEOUT_MS}",
                "safety.torque_off_s=120",
                f"robot.cameras={camera_override(twin.info)}",  # as `robo-async twin so101 camera=true` prints it
                "robot.episode.seconds=6",
                "robot.episode.reset=timer",
                "robot.episode.reset_s=0.5",
                "policy.obs_keys=[state]",
                "budget.env_steps=150",
                "launcher=serial",
                "eval_episodes=0",
                f"run_dir={run}",
                f"reward_classifier={clf}",
                "teleop=so101_leader",
                f"teleop.port={a['port']}",
                f"teleop.id={a['id']}",
                f"teleop.calibration_dir={a['calibration_dir']}",
                f"+teleop.bus_timeout_ms={BUS_TIMEOUT_MS}",
                "teleop.events_from={type: sim_leader, buttons_only: true, events: {3: is_intervention}}",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr[-3000:]
    finally:
        twin.close()
    store = PersistentReplayStore(run / "replay").open(readonly=True)
    try:
        rows = [r for _, r in store.rows("online")]
    finally:
        store.close()
    pan = np.array([r["next_obs/state"][0] for r in rows])
    success = np.array([bool(r["success"]) for r in rows])
    reward = np.array([float(r["reward"]) for r in rows])
    ended = np.array([bool(r["terminated"]) for r in rows])
    assert success.sum() >= 2, f"{success.sum()} successes in {len(rows)} rows; pan reached {pan.max():.2f}"
    np.testing.assert_array_equal(reward, success.astype(float))  # the classifier's reward, nothing else's
    np.testing.assert_array_equal(ended, success)  # each success ended its episode (its time limit did not)
    # the arm only approaches the goal in an episode and the frames lag the joints: a success was
    # seen on a frame of the arm on its way, past where the failures were trained (shoulder_pan 0.6)
    assert pan[success].min() > 0.45, pan[success]
    assert all(r["intervention"] for r in rows[10:]), "the leader arm drove from tick 3 on"
