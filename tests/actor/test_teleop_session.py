"""`robo-async teleop`: the operator drives through the one control loop; labelled episodes go to a
store and a LeRobotDataset v3; a re-recorded episode is dropped, the others kept whole."""

import subprocess
import sys

import numpy as np
import pytest

from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.commands.teleop import teleop_session
from robo_async.launch.builders import TaskArgs
from robo_async.transport.wire import OPERATOR, TAKEOVER


def test_rerecord_drops_the_episode_and_success_keeps_the_next_one_labelled(tmp_path):
    targs = TaskArgs(
        "reach",
        {"episode_ticks": 50},
        teleop={"type": "sim_leader", "id": "t", "events": {5: "rerecord_episode", 15: "success"}},
    )
    seen = []
    rec = teleop_session(
        targs, tmp_path / "store", episodes=1, realtime=False, on_episode=lambda s, k: seen.append((s, k))
    )
    assert [(s.length, s.label, k) for s, k in seen] == [(5, "rerecord", False), (10, "success", True)]
    assert rec.kept == 1 and rec.discarded == 1
    store = PersistentReplayStore(tmp_path / "store", StoreConfig()).open(readonly=True)
    try:
        rows = [r for _, r in store.rows("demos")]
    finally:
        store.close()
    assert len(rows) == 10  # only the kept episode, whole
    assert rows[-1]["success"] and rows[-1]["terminated"] and not any(r["terminated"] for r in rows[:-1])
    assert all(int(r["intervention"]) == OPERATOR for r in rows)  # the operator drove every tick


@pytest.mark.e2e
def test_teleop_command_records_the_virtual_operators_episodes_to_a_store_and_a_lerobot_dataset(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "robo_async.cli",
            "teleop",
            "task=push",
            "teleop=virtual",
            "teleop.always=true",
            f"out={tmp_path / 'store'}",
            "episodes=2",
            f"dataset={tmp_path / 'ds'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    assert "recorded 2 episodes" in res.stdout and "LeRobotDataset v3 with 2 episodes" in res.stdout
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/t", root=tmp_path / "ds")
    assert ds.num_episodes == 2 and "complementary_info.intervention" in ds.features
    iv = np.array([int(x) for x in ds.hf_dataset["complementary_info.intervention"]]).ravel()
    assert iv[0] == TAKEOVER and (iv[1:] == OPERATOR).all()
