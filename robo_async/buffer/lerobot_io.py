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
Episodes are cut per actor at `terminated or truncated`.

Units on export (`export_lerobot(..., target=)`, the task the rows are of): where the task's actions
are joint positions (an SO-10x arm, sim or real), `action`, `complementary_info.policy_action` and a
joint state (`observation.state`, `next.observation.state`) are written as LeRobot writes an arm:
names `<joint>.pos`, arm joints in degrees, the gripper 0..100 of its joint's range (`LeRobotUnits`),
so that `lerobot-train` learns, and a LeRobot robot replays, in the units LeRobot's robots read and
take. `meta/robo_async.json` keeps the task's joints and limits: importing the export without a task
(`robo-async buffer import`) converts it back to rad. Without a target rows are written as stored.

Reading a dataset back (`read_lerobot`, the units on import, what a dataset recorded elsewhere
needs) is lerobot_import.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hal.robot import innermost
from hal.spec import RobotSpec
from hal.units import LeRobotUnits, Rescale
from robo_async.buffer.codec import Column, Schema

_FLAGS = {"terminated": "next.done", "truncated": "next.truncated", "success": "next.success"}
EXPORT_META = "robo_async.json"  # in meta/: the units an export was written in (see the module's docstring)


class ImportMismatch(ValueError):
    """A LeRobotDataset's feature does not fit the task or store it is imported into (names, shape or
    range), or a store's action not the task it is exported for: one line naming both sides."""


@dataclass(frozen=True)
class ImportTarget:
    """What imported rows must fit: the task (`task`, its name in messages), its `RobotSpec` (sizes,
    joint names, joint limits in rad) and the entries its environment reports in another range
    (`rescales`, declared next to the task as its robot class's `dataset_rescales`)."""

    task: str
    spec: RobotSpec
    rescales: tuple[Rescale, ...] = ()

    @classmethod
    def of(cls, task: str, robot: object) -> ImportTarget:
        """The target of a task's robot (a `hal.Robot`, wrappers allowed): its spec and its declared
        `dataset_rescales`."""
        inner = innermost(robot)
        return cls(task, robot.spec, tuple(getattr(inner, "dataset_rescales", ())))  # type: ignore[attr-defined]


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
    base = (
        "observation.images." + name
        if col.is_image
        else ("observation.state" if name == "state" else "observation." + name)
    )
    return base if prefix == "obs" else "next." + base


def lerobot_features(
    schema: Schema, videos: bool = False, units: LeRobotUnits | None = None, converted: frozenset[str] = frozenset()
) -> dict[str, dict]:
    """The LeRobotDataset feature spec (`{name: {dtype, shape, names}}`) for our columns; next_obs images are
    left out (they are the next frame's), images as `video` when `videos`; the `converted` columns named
    by `units`' keys (`shoulder_pan.pos`, ...)."""
    feats: dict[str, dict] = {}
    for c in schema.columns:
        if c.name.startswith("next_obs/") and c.is_image:
            continue  # the next frame's image
        shape = c.shape if c.shape else (1,)
        if c.is_image:
            feats[_lerobot_name(c)] = {
                "dtype": "video" if videos else "image",
                "shape": shape,
                "names": ["height", "width", "channels"],
            }
        else:
            names = list(units.keys) if units is not None and c.name in converted else None
            feats[_lerobot_name(c)] = {"dtype": c.dtype, "shape": shape, "names": names}
    return feats


def export_units(schema: Schema, target: ImportTarget | None) -> tuple[LeRobotUnits | None, frozenset[str]]:
    """LeRobot's units for rows of `target`'s task and the columns written in them (see the module's
    docstring): (None, {}) without a target or where the task's actions are not joint positions;
    `ImportMismatch` where the store's action is not the task's."""
    if target is None or target.spec.control_mode != "joint_position":
        return None, frozenset()
    spec, cols = target.spec, {c.name: c for c in schema.columns}
    size = {name: int(np.prod(c.shape or (1,))) for name, c in cols.items()}
    if size.get("action") != spec.action_dim:
        raise ImportMismatch(
            f"the store's action has {size.get('action')} values; task {target.task} takes "
            f"{spec.action_dim} (joints {list(spec.joint_names)}): export it with its own task"
        )
    converted = {"action", "policy_action"}
    if spec.state_dim == spec.action_dim:  # the state is the joints' positions
        converted |= {"obs/state", "next_obs/state"}
    keys = [f"{j}.pos" for j in spec.joint_names]
    return (
        LeRobotUnits(keys, spec.joint_low, spec.joint_high),
        frozenset(k for k in converted if size.get(k) == spec.action_dim),
    )


def export_lerobot(
    rows: Iterator[tuple[int, dict[str, np.ndarray]]],
    schema: Schema,
    out: Path,
    *,
    task: str = "task",
    fps: int = 30,
    repo_id: str = "local/robo_async_export",
    videos: bool = False,
    target: ImportTarget | None = None,
) -> tuple[int, int]:
    """Write `rows` ((actor_id, transition) in table order) as a LeRobotDataset at `out`, camera
    frames as PNG images (lossless) or, with `videos`, as LeRobot's AV1 videos (lossy, small); the
    joints in LeRobot's units where `target` (the rows' task) drives joint positions (see the module's
    docstring). Returns (episodes, frames)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if out.exists():
        raise FileExistsError(f"{out} already exists; choose a new directory")
    units, converted = export_units(schema, target)
    feats = lerobot_features(schema, videos, units, converted)
    ds = LeRobotDataset.create(repo_id, fps=fps, features=feats, root=out, use_videos=videos, video_backend="pyav")
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
                if units is not None and c.name in converted:
                    v = units.to_lerobot_array(v)
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
    if units is not None and target is not None:
        spec = target.spec
        (out / "meta" / EXPORT_META).write_text(
            json.dumps(
                {
                    "units": "lerobot",
                    "task": target.task,
                    "joints": list(spec.joint_names),
                    "joint_low": list(spec.joint_low),
                    "joint_high": list(spec.joint_high),
                    "state_size": spec.state_dim,
                    "features": sorted(_lerobot_name(c) for c in schema.columns if c.name in converted),
                },
                indent=2,
            )
        )
    return episodes, frames


def exported_target(root: Path, fps: float = 30.0) -> ImportTarget | None:
    """The target an export of ours was written for (`meta/robo_async.json`: its task's joints and
    limits), which converts it back to rad; None for other datasets."""
    path = root / "meta" / EXPORT_META
    if not path.exists():
        return None
    meta = json.loads(path.read_text())
    spec = RobotSpec(
        name=f"export of {meta['task']}",
        joint_names=tuple(meta["joints"]),
        joint_low=tuple(meta["joint_low"]),
        joint_high=tuple(meta["joint_high"]),
        hz=fps,
        state_size=int(meta["state_size"]),
    )
    return ImportTarget(str(meta["task"]), spec)
