"""LeRobotDatasets between LeRobot's own tools and ours, on the SO-101 twin: a dataset recorded by
LeRobot's recording code (so101_follower + so101_leader, the leader moved by a scripted hand) imports
into task `reach` in rad, matching the twin's truth; our export of a reach store trains in
`lerobot-train` unchanged, in LeRobot's motor names and units.

LeRobot's commands run as a user runs them (subprocesses, offline). The recording is
`lerobot-record`'s own `main()` with its CLI flags, in a process that first gives the buses the
twin's timeout floor (`hardware.lerobot_adapter.set_bus_timeout`, as the twin fixture's configs
do): `lerobot-record` itself has no such option, and with LeRobot's 50 ms it failed here 1 run in 5
on a 2-core machine (`ConnectionError: Failed to sync read 'Present_Position' on ids=[1, 2, 3, 4,
5, 6] after 3 tries. [TxRxResult] There is no status packet!`, right after saving an episode).
"""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from robo_async.buffer import tools
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from tests.hardware.conftest import BUS_TIMEOUT_MS

TICK = 2 * np.pi / 4096  # one encoder tick (rad)
MOTORS = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
GRIPPER_LOW, GRIPPER_HIGH = -0.17, 1.75  # the gripper joint's range (rad): LeRobot's 0 and 100
BIN = Path(sys.executable).parent
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
# the hand's cycle (rad): the gripper closed (LeRobot 0) at A, open (100) at B
CYCLE = np.array(
    [
        [0.5, -0.4, 0.6, 0.3, -0.8, GRIPPER_LOW],
        [-0.6, 0.5, -0.4, -0.5, 1.0, GRIPPER_HIGH],
        [0.2, 0.8, 1.0, 0.6, 0.3, 0.8],
    ]
)
# lerobot-record (its main(), its flags), its robot and teleoperator given the twin's bus timeout floor
RECORD = f"""
from hardware.lerobot_adapter import set_bus_timeout
from lerobot.scripts import lerobot_record as rec

def patient(make):
    def made(config):
        device = make(config)
        set_bus_timeout(device, {BUS_TIMEOUT_MS})
        return device
    return made

rec.make_robot_from_config = patient(rec.make_robot_from_config)
rec.make_teleoperator_from_config = patient(rec.make_teleoperator_from_config)
rec.main()
"""
HAND_SPEED = 1.2  # rad/s per joint at most (the twin's hand follows up to 3)
DWELL_S = 0.3  # held at each waypoint


class ScriptedHand:
    """A hand moving the twin's leader along `CYCLE` (from where it is, then around and around),
    in 10 ms steps at up to `HAND_SPEED`, holding each waypoint `DWELL_S`."""

    def __init__(self, twin) -> None:
        self.twin = twin
        self.start_q = np.asarray(twin.state("leader")["q"])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scripted-hand", daemon=True)

    def _run(self) -> None:
        q, k, dt = self.start_q.copy(), 0, 0.01
        while not self._stop.is_set():
            goal = CYCLE[k % len(CYCLE)]
            steps = max(1, int(np.ceil(np.abs(goal - q).max() / (HAND_SPEED * dt))))
            for i in range(1, steps + 1):  # along the straight segment
                if self._stop.is_set():
                    return
                self._step(q + (goal - q) * i / steps, dt)
            q = goal
            for _ in range(int(DWELL_S / dt)):
                self._step(q, dt)
            k += 1

    def _step(self, q: np.ndarray, dt: float) -> None:
        self.twin.control("hand", role="leader", q=q.tolist())
        time.sleep(dt)

    def __enter__(self) -> "ScriptedHand":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def readings(twin, role: str) -> np.ndarray:
    """Every whole-arm position reading `role`'s bus served (rad, as the ticks sent stand for them)."""
    r = twin.control("readings", role=role, since=0)
    assert r["first"] == 0, f"the twin kept only the last {len(r['q'])} of {r['total']} readings"
    return np.asarray(r["q"], np.float64).reshape(-1, len(MOTORS))


def match_in_order(frames: np.ndarray, served: np.ndarray, tol: float) -> np.ndarray:
    """Per frame (in recording order), the largest per-joint difference (rad) from the first served
    reading at or after the previous frame's match that lies within `tol` (a frame with none: its
    difference from the nearest later reading, and the search goes on from where it was)."""
    err, cursor = np.empty(len(frames)), 0
    for k, f in enumerate(frames):
        d = np.abs(served[cursor:] - f).max(-1)
        hit = np.flatnonzero(d <= tol)
        err[k] = d.min() if hit.size == 0 else d[hit[0]]
        cursor += 0 if hit.size == 0 else int(hit[0])
    return err


def run(*cmd: object, timeout: float = 240) -> subprocess.CompletedProcess:
    """A command as a user runs it (offline); it must exit 0."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=OFFLINE, timeout=timeout)
    assert r.returncode == 0, (
        f"{' '.join(map(str, cmd[:3]))} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    )
    return r


def lerobot_record(twin, root: Path, fps: int = 20, episodes: int = 2, seconds: float = 4) -> Path:
    """lerobot-record of the twin's so101_follower driven by its so101_leader, no cameras (`RECORD`)."""
    f, lead = twin.info["arms"]["follower"], twin.info["arms"]["leader"]
    run(
        sys.executable,
        "-c",
        RECORD,
        "--robot.type=so101_follower",
        f"--robot.port={f['port']}",
        f"--robot.id={f['id']}",
        f"--robot.calibration_dir={f['calibration_dir']}",
        "--teleop.type=so101_leader",
        f"--teleop.port={lead['port']}",
        f"--teleop.id={lead['id']}",
        f"--teleop.calibration_dir={lead['calibration_dir']}",
        "--dataset.repo_id=local/twin_so101",
        f"--dataset.root={root}",
        "--dataset.single_task=reach",
        f"--dataset.fps={fps}",
        f"--dataset.episode_time_s={seconds}",
        "--dataset.reset_time_s=0",
        f"--dataset.num_episodes={episodes}",
        "--dataset.video=false",
        "--dataset.push_to_hub=false",
        "--play_sounds=false",
        "--display_data=false",
    )
    return root


def reach_target():
    """What `robo-async train task=reach buffer.imports=[...]` converts a LeRobotDataset to."""
    from robo_async.launch.tasks import import_target, task_args

    return import_target(task_args({"name": "reach"}))


@pytest.mark.timeout(300)  # LeRobot's start under a loaded suite
@pytest.mark.e2e
def test_a_lerobot_record_dataset_imports_into_reach_in_rad_as_the_twin_moved(twin, tmp_path):
    """`lerobot-record` writes `<motor>.pos` in degrees and gripper 0..100; imported as a reach run
    imports it, each frame's action is one of the leader's readings the twin served and its state one
    of the follower's, in rad, in recording order, within 2 encoder ticks (LeRobot's degrees are
    1/4095 of a turn, ours 2 pi/4096; measured: about 1), however fast the machine was. Break-checked:
    without the conversion the actions are off by about 64,000 ticks, the gripper's 0 taken as 0 rad
    by about 110."""
    with ScriptedHand(twin):
        ds = lerobot_record(twin, tmp_path / "so101_rec")
    served = {role: readings(twin, role) for role in ("leader", "follower")}
    info = json.loads((ds / "meta" / "info.json").read_text())
    keys = [f"{m}.pos" for m in MOTORS]
    assert info["robot_type"] == "so_follower" and info["total_episodes"] == 2
    assert info["features"]["action"]["names"] == keys and info["features"]["observation.state"]["names"] == keys

    store = PersistentReplayStore(tmp_path / "store", StoreConfig(commit_ms=5)).open()
    try:
        n = tools.import_source(store, ds, "demos", target=reach_target())
        rows = [r for _, r in store.rows("demos")]
    finally:
        store.close()
    assert n == info["total_frames"] == len(rows) >= 10
    actions = np.stack([r["action"] for r in rows]).astype(np.float64)
    states = np.stack([r["obs/state"] for r in rows]).astype(np.float64)
    # the hand moved the arms while LeRobot recorded (so the matches below are not of one still pose)
    assert np.ptp(served["leader"], axis=0).max() > 0.2 and np.ptp(actions, axis=0).max() > 0.05

    # the leader's readings (LeRobot: degrees, gripper 0..100) are the actions, in rad
    action_err = match_in_order(actions, served["leader"], 2 * TICK)
    assert action_err.max() <= 2 * TICK, (
        f"frame {action_err.argmax()}'s action is {action_err.max() / TICK:.1f} ticks from the leader's readings"
    )
    # the follower's readings are the states
    state_err = match_in_order(states, served["follower"], 2 * TICK)
    assert state_err.max() <= 2 * TICK, (
        f"frame {state_err.argmax()}'s state is {state_err.max() / TICK:.1f} ticks from the follower's readings"
    )

    # `robo-async buffer import ... task=reach` converts the same way
    run(BIN / "robo-async", "buffer", "import", tmp_path / "cli_store", f"from={ds}", "task=reach")
    cli = PersistentReplayStore(tmp_path / "cli_store").open(readonly=True)
    try:
        np.testing.assert_array_equal(np.stack([r["action"] for _, r in cli.rows("demos")]), actions.astype(np.float32))
    finally:
        cli.close()


def lerobot_columns(root: Path, *features: str) -> dict[str, np.ndarray]:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    hf = LeRobotDataset("local/check", root=root, video_backend="pyav").hf_dataset.with_format("numpy")
    return {f: np.stack(hf[f]).astype(np.float64) for f in features}


@pytest.mark.timeout(300)  # three of our commands and lerobot-train, each starting torch
@pytest.mark.e2e
def test_our_export_of_reach_trains_in_lerobot_train_in_lerobots_units_and_imports_back(tmp_path):
    """A reach store (scripted demos with a front camera: ACT wants an image or an environment
    state) exported with task=reach: actions and states as LeRobot's `<motor>.pos` in degrees and
    gripper 0..100, which `lerobot-train` (ACT, tiny, CPU, no pretrained backbone: offline)
    normalizes by; imported back without a task, the rows are the store's, in rad."""
    store, ds, back = tmp_path / "store", tmp_path / "lerobot", tmp_path / "back"
    run(
        BIN / "robo-async",
        "buffer",
        "demos",
        f"out={store}",
        "episodes=3",
        "task=reach",
        "cameras=front",
        "image_size=64",
        "hold=true",
    )
    out = run(
        BIN / "robo-async", "buffer", "export", store, "--format", "lerobot", f"out={ds}", "table=demos", "task=reach"
    )
    assert "LeRobot's <motor>.pos" in out.stdout

    keys = [f"{m}.pos" for m in MOTORS]
    feats = json.loads((ds / "meta" / "info.json").read_text())["features"]
    for f in ("action", "observation.state", "next.observation.state", "complementary_info.policy_action"):
        assert feats[f]["names"] == keys, f
    src = PersistentReplayStore(store).open(readonly=True)
    try:
        rows = [r for _, r in src.rows("demos")]
    finally:
        src.close()
    rad = {
        "action": np.stack([r["action"] for r in rows]),
        "observation.state": np.stack([r["obs/state"] for r in rows]),
    }
    got = lerobot_columns(ds, *rad)
    for f, q in rad.items():  # LeRobot's units: degrees, the gripper 0..100 over [low, high]
        np.testing.assert_allclose(got[f][:, :5], np.rad2deg(q[:, :5]), atol=1e-3, err_msg=f)
        np.testing.assert_allclose(
            got[f][:, 5], (q[:, 5] - GRIPPER_LOW) / (GRIPPER_HIGH - GRIPPER_LOW) * 100, atol=1e-3, err_msg=f
        )

    train = tmp_path / "train"
    run(
        BIN / "lerobot-train",
        "--dataset.repo_id=local/reach_export",
        f"--dataset.root={ds}",
        "--policy.type=act",
        "--policy.device=cpu",
        "--policy.pretrained_backbone_weights=null",
        "--policy.dim_model=64",
        "--policy.n_heads=2",
        "--policy.dim_feedforward=128",
        "--policy.n_encoder_layers=1",
        "--policy.n_decoder_layers=1",
        "--policy.chunk_size=10",
        "--policy.n_action_steps=10",
        "--steps=3",
        "--batch_size=2",
        "--num_workers=0",
        "--save_freq=3",
        "--policy.push_to_hub=false",
        "--wandb.enable=false",
        f"--output_dir={train}",
    )
    model = train / "checkpoints" / "000003" / "pretrained_model"
    config = json.loads((model / "config.json").read_text())
    assert config["input_features"]["observation.state"]["shape"] == [6]
    assert config["output_features"]["action"]["shape"] == [6]
    from safetensors.numpy import load_file

    norm = load_file(str(next(model.glob("policy_preprocessor_step_*_normalizer_processor.safetensors"))))
    stats = json.loads((ds / "meta" / "stats.json").read_text())
    for f in ("action", "observation.state"):  # what ACT normalizes by: the export's degrees
        np.testing.assert_allclose(norm[f"{f}.max"], stats[f]["max"], rtol=1e-5)
        np.testing.assert_allclose(norm[f"{f}.max"][:5], np.rad2deg(rad[f][:, :5].max(0)), atol=1e-3)

    run(BIN / "robo-async", "buffer", "import", back, f"from={ds}")  # no task: the export says its units
    dst = PersistentReplayStore(back).open(readonly=True)
    try:
        again = [r for _, r in dst.rows("demos")]
    finally:
        dst.close()
    assert len(again) == len(rows)
    for col in ("action", "obs/state", "next_obs/state", "policy_action"):
        np.testing.assert_allclose(
            np.stack([r[col] for r in again]), np.stack([r[col] for r in rows]), atol=1e-5, err_msg=col
        )
