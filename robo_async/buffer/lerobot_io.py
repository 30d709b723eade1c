"""Export a replay table as a LeRobotDataset v3, and read LeRobot datasets back as transitions.

Field mapping (ours <-> LeRobot):
    obs/state                  <-> observation.state
    obs/<camera> (H x W x 3)   <-> observation.images.<camera>  (stored as images, no video)
    obs/<feature>              <-> observation.<feature>
    next_obs/<non-image>       <-> next.observation.<...>       (exact round trip)
    next_obs/<camera>          <-  the next frame's image (the episode's last frame reuses its own)
    action                     <-> action
    reward, terminated         <-> next.reward, next.done
    truncated, success         <-> next.truncated, next.success
    policy_version             <-> complementary_info.policy_version
Episodes are cut per actor at `terminated or truncated`. A dataset recorded elsewhere needs only
observation.*, action and (optionally) next.reward / next.done; missing flags default to False,
missing rewards to 0 and policy versions to -1.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from robo_async.buffer.codec import Column, Schema

log = logging.getLogger(__name__)
_FLAGS = {"terminated": "next.done", "truncated": "next.truncated", "success": "next.success"}


def _lerobot_name(col: Column) -> str:
    prefix, _, name = col.name.partition("/")
    if col.name == "action":
        return "action"
    if col.name == "reward":
        return "next.reward"
    if col.name in _FLAGS:
        return _FLAGS[col.name]
    if col.name in ("policy_version", "intervention", "policy_action"):  # who acted, and what the policy wanted
        return "complementary_info." + col.name
    base = "observation.images." + name if col.is_image else (
        "observation.state" if name == "state" else "observation." + name)
    return base if prefix == "obs" else "next." + base


def lerobot_features(schema: Schema, videos: bool = False) -> dict[str, dict]:
    """The LeRobotDataset feature spec (`{name: {dtype, shape, names}}`) for our columns; next_obs images are
    left out (they are the next frame's), images as `video` when `videos`."""
    feats: dict[str, dict] = {}
    for c in schema.columns:
        if c.name.startswith("next_obs/") and c.is_image:
            continue  # the next frame's image
        shape = c.shape if c.shape else (1,)
        if c.is_image:
            feats[_lerobot_name(c)] = {"dtype": "video" if videos else "image", "shape": shape,
                                       "names": ["height", "width", "channels"]}
        else:
            feats[_lerobot_name(c)] = {"dtype": c.dtype, "shape": shape, "names": None}
    return feats


def export_lerobot(rows: Iterator[tuple[int, dict[str, np.ndarray]]], schema: Schema, out: Path, *,
                   task: str = "task", fps: int = 30, repo_id: str = "local/robo_async_export",
                   videos: bool = False) -> tuple[int, int]:
    """Write `rows` ((actor_id, transition) in table order) as a LeRobotDataset at `out`, camera
    frames as PNG images (lossless) or, with `videos`, as LeRobot's AV1 videos (lossy, small).
    Returns (episodes, frames)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if out.exists():
        raise FileExistsError(f"{out} already exists; choose a new directory")
    feats = lerobot_features(schema, videos)
    ds = LeRobotDataset.create(repo_id, fps=fps, features=feats, root=out, use_videos=videos,
                               video_backend="pyav")
    open_eps: dict[int, list[dict]] = {}
    episodes = frames = 0

    def flush(actor: int) -> None:
        nonlocal episodes, frames
        for row in open_eps.pop(actor, []):
            frame: dict[str, object] = {"task": task}
            for c in schema.columns:
                if c.name.startswith("next_obs/") and c.is_image:
                    continue
                v = row[c.name]
                frame[_lerobot_name(c)] = v if c.is_image or c.shape else np.asarray([v], dtype=c.dtype)
            ds.add_frame(frame)
            frames += 1
        ds.save_episode()
        episodes += 1

    for actor, row in rows:
        open_eps.setdefault(actor, []).append(row)
        if bool(row["terminated"]) or bool(row["truncated"]):
            flush(actor)
    for actor in list(open_eps):  # unfinished episodes at the end of the data
        flush(actor)
    ds.finalize()
    return episodes, frames


def read_lerobot(root: Path, schema: Schema | None = None) -> Iterator[dict[str, np.ndarray | np.generic]]:
    """Transitions (one dict per frame, our column names) from a LeRobotDataset at `root`,
    shaped to `schema` when given (missing columns raise ValueError naming them); without a
    schema, scalar columns are numpy scalars."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/import", root=root, video_backend="pyav")
    feats = ds.features
    ours: dict[str, str] = {}  # our name -> lerobot name for observations
    for name, f in feats.items():
        if name.startswith("observation.images."):
            ours["obs/" + name.removeprefix("observation.images.")] = name
        elif name == "observation.state":
            ours["obs/state"] = name
        elif name.startswith("observation."):
            ours["obs/" + name.removeprefix("observation.")] = name
    if schema is not None:
        need = {c.name for c in schema.columns if c.name.startswith("obs/")}
        missing = need - set(ours)
        if missing:
            raise ValueError(f"dataset {root} has observations {sorted(ours.values())}; this store also "
                             f"needs {sorted(missing)} (LeRobot names: observation.<name> or "
                             f"observation.images.<camera>)")
    hf = ds.hf_dataset
    n = len(hf)
    # video-encoded cameras are not in the parquet rows: LeRobot decodes them per frame (ds[i])
    videos = [lr for lr in ours.values() if feats[lr]["dtype"] == "video"]
    decoded: dict[int, dict] = {}

    def frame(i: int) -> dict:
        row = dict(hf[i])
        if videos:
            if i not in decoded:
                item = ds[i]
                decoded.clear()  # keep one: frame i + 1 is asked for twice (as next, then as current)
                decoded[i] = {k: item[k] for k in videos}
            row.update(decoded[i])
        return row

    nxt_row = frame(0) if n else None
    for i in range(n):
        cur = nxt_row
        assert cur is not None  # (row i was read as the next row of i - 1)
        nxt = frame(i + 1) if i + 1 < n else None
        nxt_row = nxt
        last = nxt is None or int(nxt["episode_index"]) != int(cur["episode_index"])
        if last:
            nxt = cur
        assert nxt is not None
        row: dict[str, np.ndarray | np.generic] = {}
        for k, lr in ours.items():
            row[k] = _np(cur[lr], feats[lr])
            nk = "next." + lr
            row["next_" + k] = _np(cur[nk], feats[nk]) if nk in cur else _np(nxt[lr], feats[lr])
        row["action"] = _np(cur["action"], feats["action"]).astype(np.float32)
        row["reward"] = np.float32(_scalar(cur, "next.reward", 0.0))
        done = bool(_scalar(cur, "next.done", False))
        row["terminated"] = np.bool_(done)
        row["truncated"] = np.bool_(_scalar(cur, "next.truncated", last and not done))
        row["success"] = np.bool_(_scalar(cur, "next.success", False))
        row["policy_version"] = np.int64(_scalar(cur, "complementary_info.policy_version", -1))
        row["intervention"] = np.uint8(_scalar(cur, "complementary_info.intervention", 0))
        pa = "complementary_info.policy_action"
        row["policy_action"] = _np(cur[pa], feats[pa]).astype(np.float32) if pa in cur else row["action"]
        yield row if schema is None else {c.name: np.asarray(row[c.name], dtype=c.dtype).reshape(c.shape)
                                           for c in schema.columns if c.name in row}


def _scalar(item: dict, key: str, default: float | bool) -> float | bool:
    if key not in item:
        return default
    v = item[key]
    return v.item() if hasattr(v, "item") else v


def _np(value: object, feat: dict) -> np.ndarray:
    """A LeRobot value (torch tensor, images as float C x H x W in [0, 1]) as our numpy array."""
    a = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    if feat["dtype"] in ("image", "video"):
        if a.ndim == 3 and a.shape[0] in (1, 3, 4) and a.shape[-1] not in (1, 3, 4):
            a = np.transpose(a, (1, 2, 0))
        if a.dtype != np.uint8:
            a = np.clip(np.rint(a * 255.0), 0, 255).astype(np.uint8)
    return a
