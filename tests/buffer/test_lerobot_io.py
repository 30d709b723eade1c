"""Export to a LeRobotDataset v3, load it with LeRobot's own class, import it back: same values."""

import numpy as np
import pytest

from robo_async.buffer import tools
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from tests.buffer.test_lmdb_store import batch


def episode_batch(actor, seq, n, end="terminated"):
    b = batch(actor, seq, n, images=1, size=16)
    b.arrays["obs/state"][:, 0] += 1000 * actor  # content unique across actors
    b.arrays["next_obs/state"][:, 0] += 1000 * actor
    b.arrays["reward"][:] = b.arrays["obs/state"][:, 0]
    b.arrays["policy_version"][:] = actor + 3
    b.arrays[end][-1] = True
    b.arrays["success"][-1] = end == "terminated"
    return b


@pytest.fixture
def source(tmp_path):
    s = PersistentReplayStore(tmp_path / "src", StoreConfig(commit_ms=5)).open()
    s.insert(episode_batch(0, 0, 6))
    s.insert(episode_batch(1, 0, 4, end="truncated"))
    s.insert(episode_batch(0, 6, 5, end="truncated"))
    s.flush()
    rows = {int(r["obs/state"][0]): r for _, r in s.rows()}
    s.close()
    return tmp_path / "src", rows


def test_export_loads_in_lerobot_and_imports_back(source, tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    src, rows = source
    eps, frames = tools.export(src, tmp_path / "ds", task="reach", fps=30)
    assert (eps, frames) == (3, 15)
    ds = LeRobotDataset("local/check", root=tmp_path / "ds", video_backend="pyav")
    assert ds.num_episodes == 3 and ds.num_frames == 15
    item = ds[0]
    assert item["task"] == "reach" and item["observation.images.cam0"].shape == (3, 16, 16)
    assert "next.done" in item and "complementary_info.policy_version" in item

    dst = PersistentReplayStore(tmp_path / "dst", StoreConfig(commit_ms=5)).open()
    assert tools.import_source(dst, tmp_path / "ds", "demos") == 15
    assert tools.import_source(dst, tmp_path / "ds", "demos") == 0  # idempotent
    back = {int(r["obs/state"][0]): r for _, r in dst.rows("demos")}
    dst.close()
    assert set(back) == set(rows)
    for key, r in rows.items():
        b = back[key]
        for col in (
            "obs/state",
            "next_obs/state",
            "action",
            "reward",
            "terminated",
            "truncated",
            "success",
            "policy_version",
            "obs/cam0",
        ):
            np.testing.assert_array_equal(b[col], r[col], err_msg=f"{col} of {key}")
        if not (r["terminated"] or r["truncated"]):  # the episode's last next frame is not in LeRobot
            np.testing.assert_array_equal(b["next_obs/cam0"], r["next_obs/cam0"])


def test_import_of_an_earlier_store_and_of_a_mismatched_dataset(source, tmp_path):
    src, rows = source
    dst = PersistentReplayStore(tmp_path / "dst", StoreConfig(commit_ms=5)).open()
    assert tools.import_source(dst, src, "online") == 15
    assert dst.counts["online"] == 15 and all(a >= tools.IMPORT_ACTOR_BASE for a in dst.high_water())
    dst.close()
    tools.export(src, tmp_path / "ds", task="reach", fps=30)
    other = PersistentReplayStore(tmp_path / "other", StoreConfig(commit_ms=5)).open()
    b = batch(0, 0, 2)
    b.arrays["obs/wrist"] = b.arrays["next_obs/wrist"] = np.zeros((2, 3), np.float32)
    other.insert(b)
    other.flush()
    with pytest.raises(ValueError, match=r"needs \['obs/wrist'\]"):
        tools.import_source(other, tmp_path / "ds", "demos")
    other.close()
    with pytest.raises(FileNotFoundError, match="neither a replay store"):
        tools.import_source(other, tmp_path, "demos")


def test_inspect_reports_tables(source):
    src, _ = source
    text = tools.inspect(src)
    online = [ln for ln in text.splitlines() if ln.startswith("online")][0].split()
    assert online[1:] == ["15", "3", "33%", "2"]  # transitions, episodes, success, actors
    assert "last commit:" in text and "disk:" in text


def test_a_video_encoded_dataset_imports_with_its_frames(tmp_path):
    """LeRobotDatasets with cameras as videos (most on the hub): frames are decoded on import."""
    s = PersistentReplayStore(tmp_path / "src", StoreConfig(commit_ms=5)).open()
    b = batch(0, 0, 6, images=1, size=64)  # AV1 needs frames larger than 16x16
    b.arrays["terminated"][-1] = True
    grad = np.add.outer(np.arange(64), np.arange(64))[..., None] // 4  # smooth, like a camera frame
    frames = np.stack([np.broadcast_to(grad + 30 * i, (64, 64, 3)) for i in range(7)]).astype(np.uint8)
    b.arrays["obs/cam0"][:] = frames[:6]
    b.arrays["next_obs/cam0"][:] = frames[1:]
    s.insert(b)
    s.flush()
    s.close()
    eps, frames = tools.export(tmp_path / "src", tmp_path / "ds", task="reach", fps=30, videos=True)
    assert (eps, frames) == (1, 6)
    assert list((tmp_path / "ds").rglob("*.mp4"))
    dst = PersistentReplayStore(tmp_path / "dst", StoreConfig(commit_ms=5)).open()
    assert tools.import_source(dst, tmp_path / "ds", "demos") == 6
    back = [r for _, r in dst.rows("demos")]
    dst.close()
    for i, r in enumerate(back):
        np.testing.assert_array_equal(r["obs/state"], b.arrays["obs/state"][i])
        assert r["obs/cam0"].shape == (64, 64, 3) and r["obs/cam0"].dtype == np.uint8
        # lossy video: close to the frame that was written, far from the others
        err = np.abs(r["obs/cam0"].astype(int) - b.arrays["obs/cam0"][i]).mean()
        other = np.abs(r["obs/cam0"].astype(int) - b.arrays["obs/cam0"][(i + 1) % 6]).mean()
        assert err < 20 and other > 2 * err, (i, err, other)
