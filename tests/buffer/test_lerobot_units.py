"""LeRobotDataset imports into a task: converted to the task's units where the dataset says (LeRobot
motor names) or the task declares the mapping (gym_hil's gripper command), refused in one line
where they do not fit; never imported as they are."""

import numpy as np
import pytest

from robo_async.buffer import tools
from robo_async.buffer.lerobot_io import ImportMismatch, ImportTarget
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from sim import GymHilRobot, ReachTask, SimRobot
from sim.gym_hil import GRIPPER_INDEX, GRIPPER_STATE

MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")


def record(root, state, action, names=None, env=None):
    """A LeRobotDataset as LeRobot's recorders write one: `state` [T, S] and `action` [T, A] (one
    episode), entry names `names` (e.g. lerobot-record's `shoulder_pan.pos`, ...)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    feats = {
        "observation.state": {"dtype": "float32", "shape": (state.shape[1],), "names": names},
        "action": {"dtype": "float32", "shape": (action.shape[1],), "names": names},
        "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
        "next.done": {"dtype": "bool", "shape": (1,), "names": None},
    }
    if env is not None:
        feats["observation.environment_state"] = {"dtype": "float32", "shape": (env.shape[1],), "names": None}
    ds = LeRobotDataset.create(
        "local/recorded", fps=10, features=feats, root=root, use_videos=False, video_backend="pyav"
    )
    for t in range(len(state)):
        frame = {
            "task": "pick",
            "observation.state": state[t].astype(np.float32),
            "action": action[t].astype(np.float32),
            "next.reward": np.zeros(1, np.float32),
            "next.done": np.array([t == len(state) - 1]),
        }
        if env is not None:
            frame["observation.environment_state"] = env[t].astype(np.float32)
        ds.add_frame(frame)
    ds.save_episode()
    ds.finalize()
    return root


def imported(path, target):
    store = PersistentReplayStore(path, StoreConfig(commit_ms=5)).open()
    try:
        n = tools.import_source(store, target[0], "demos", target=target[1])
        rows = [r for _, r in store.rows("demos")]
    finally:
        store.close()
    assert n == len(rows)
    return rows


@pytest.fixture(scope="module")
def gym_hil():
    return ImportTarget.of("gym_hil", GymHilRobot())


def gym_hil_episode(t=12, grip_scale=255.0):
    """gym_hil's own observations (its agent_pos, the gripper command at 14 in 0..255), its actions."""
    rng = np.random.default_rng(0)
    state = rng.uniform(-1, 1, (t, 18))
    state[:, GRIPPER_INDEX] = np.linspace(0, 1, t) * grip_scale
    action = np.column_stack([rng.uniform(-1, 1, (t, 3)), rng.integers(0, 3, t)])  # grip 0 open, 1 stay, 2 close
    return state, action, rng.uniform(0, 0.3, (t, 3))


def test_a_gym_hil_recording_gets_the_tasks_gripper_fraction(tmp_path, gym_hil):
    """A dataset recorded from gym_hil's raw env (gripper command 0..255) imports into task=gym_hil with
    the command as the fraction 0..1 the task gives (as sim.gym_hil declares), not 0..255."""
    assert gym_hil.rescales == (GRIPPER_STATE,)
    state, action, env = gym_hil_episode()
    rows = imported(tmp_path / "store", (record(tmp_path / "raw", state, action, env=env), gym_hil))
    got = np.stack([r["obs/state"] for r in rows])
    np.testing.assert_allclose(got[:, GRIPPER_INDEX], state[:, GRIPPER_INDEX] / 255.0, atol=1e-6)
    assert got[:, GRIPPER_INDEX].max() <= 1.0
    np.testing.assert_allclose(np.delete(got, GRIPPER_INDEX, 1), np.delete(state, GRIPPER_INDEX, 1), atol=1e-6)
    nxt = np.stack([r["next_obs/state"] for r in rows])
    np.testing.assert_allclose(nxt[:-1, GRIPPER_INDEX], state[1:, GRIPPER_INDEX] / 255.0, atol=1e-6)
    np.testing.assert_allclose(np.stack([r["action"] for r in rows]), action, atol=1e-6)  # gym_hil's own 0..2

    # without meta/stats.json the ranges come from a pass over the frames
    raw = record(tmp_path / "raw_nostats", state, action, env=env)
    (raw / "meta" / "stats.json").unlink()
    rows = imported(tmp_path / "store_nostats", (raw, gym_hil))
    np.testing.assert_allclose(
        [r["obs/state"][GRIPPER_INDEX] for r in rows], state[:, GRIPPER_INDEX] / 255.0, atol=1e-6
    )

    # data already in the task's units (our own export) is kept as it is
    state01, action, env = gym_hil_episode(grip_scale=1.0)
    rows = imported(tmp_path / "store2", (record(tmp_path / "ours", state01, action, env=env), gym_hil))
    np.testing.assert_allclose(np.stack([r["obs/state"] for r in rows]), state01, atol=1e-6)


def test_what_does_not_fit_gym_hil_is_refused_in_one_line_and_nothing_is_stored(tmp_path, gym_hil):
    state, action, env = gym_hil_episode()
    action[:, 3] = np.linspace(0, 255, len(action))  # a gripper command 0..255 where the task takes 0..2
    store = PersistentReplayStore(tmp_path / "store", StoreConfig(commit_ms=5)).open()
    try:
        with pytest.raises(ImportMismatch) as e:
            tools.import_source(store, record(tmp_path / "a", state, action, env=env), "demos", target=gym_hil)
        assert str(e.value) == "action[3] (a3) spans 0..255 in the dataset; task gym_hil takes 0..2"
        state, action, env = gym_hil_episode()
        state[0, GRIPPER_INDEX] = -300.0  # neither the task's 0..1 nor the env's 0..255
        with pytest.raises(
            ImportMismatch,
            match=r"^observation.state\[14\] \(gripper command\) spans -300..255 in "
            r"the dataset; task gym_hil takes 0..1 \(or 0..255, which it converts\)$",
        ):
            tools.import_source(store, record(tmp_path / "b", state, action, env=env), "demos", target=gym_hil)
        with pytest.raises(ImportMismatch, match=r"^action has 6 values in the dataset; task gym_hil takes 4 "):
            tools.import_source(store, record(tmp_path / "c", state, np.zeros((12, 6))), "demos", target=gym_hil)
        assert store.counts["demos"] == 0
    finally:
        store.close()


@pytest.fixture(scope="module")
def reach():
    return ImportTarget.of("reach", SimRobot(ReachTask()))


def so101_episode(t=10):
    """lerobot-record's units for an SO-101 (use_degrees=True): arm joints in degrees, gripper 0..100."""
    deg = np.column_stack(
        [
            np.linspace(-60, 60, t),
            np.linspace(-45, 30, t),
            np.linspace(0, 80, t),
            np.linspace(-20, 20, t),
            np.linspace(-90, 90, t),
            np.linspace(0, 100, t),
        ]
    )
    return deg, deg + 1.0


def test_an_so101_dataset_in_degrees_imports_in_rad(tmp_path, reach):
    spec = reach.spec
    assert spec.joint_names == MOTORS
    state, action = so101_episode()
    # lerobot-record's names, in another order than the task's joints (gripper first)
    order = [5, 0, 1, 2, 3, 4]
    names = [f"{MOTORS[i]}.pos" for i in order]
    rows = imported(tmp_path / "store", (record(tmp_path / "so101", state[:, order], action[:, order], names), reach))
    got = np.stack([r["obs/state"] for r in rows])
    low, high = np.asarray(spec.joint_low), np.asarray(spec.joint_high)
    np.testing.assert_allclose(got[:, :5], np.deg2rad(state[:, :5]), atol=1e-5)
    np.testing.assert_allclose(got[:, 5], low[5] + state[:, 5] / 100 * (high[5] - low[5]), atol=1e-5)
    assert got[0, 5] == pytest.approx(low[5]) and got[-1, 5] == pytest.approx(high[5])  # gripper 0 -> low, 100 -> high
    acts = np.stack([r["action"] for r in rows])
    np.testing.assert_allclose(acts[:, :5], np.deg2rad(action[:, :5]), atol=1e-5)
    np.testing.assert_allclose(np.stack([r["policy_action"] for r in rows]), acts)


def test_degrees_without_a_task_or_without_names_are_refused(tmp_path, reach):
    state, action = so101_episode()
    names = [f"{m}.pos" for m in MOTORS]
    store = PersistentReplayStore(tmp_path / "store", StoreConfig(commit_ms=5)).open()
    try:
        with pytest.raises(ImportMismatch, match=r"LeRobot motors .* import it into a run \(buffer.imports\)"):
            tools.import_source(store, record(tmp_path / "a", state, action, names), "demos")
        # degrees with no names to say so: out of the joints' range in rad
        with pytest.raises(
            ImportMismatch,
            match=r"^action\[0\] \(shoulder_pan\) spans -59..61 in the dataset; "
            r"task reach takes -1.92..1.92$",
        ):
            tools.import_source(store, record(tmp_path / "b", state, action), "demos", target=reach)
        other = [f"{m}.pos" for m in ("waist", *MOTORS[1:])]  # another arm's motors
        with pytest.raises(ImportMismatch, match=r"holds LeRobot motors \['waist.pos'.*task reach takes joints"):
            tools.import_source(store, record(tmp_path / "c", state, action, other), "demos", target=reach)
        assert store.counts["demos"] == 0
    finally:
        store.close()


def test_a_run_imports_into_its_tasks_target():
    """`buffer.imports` of a run: the run's task, its spec and its declared ranges (robo_async/commands/train.py)."""
    from robo_async.launch.tasks import import_target, task_args

    target = import_target(task_args({"name": "gym_hil"}))
    assert target.task == "gym_hil" and target.rescales == (GRIPPER_STATE,) and target.spec.action_dim == 4
