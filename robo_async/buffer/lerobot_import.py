"""Read a LeRobotDataset back as transitions (`read_lerobot`; the field mapping and the export are
lerobot_io.py). A dataset recorded elsewhere needs only observation.*, action and (optionally)
next.reward / next.done; missing flags default to False, missing rewards to 0 and policy versions
to -1.

Units on import (`read_lerobot(..., target=)`; the conversions themselves are `hal.units`'s):
    shapes     `action` and `observation.state` must have the task's sizes (the store's, without a
               target), else `ImportMismatch` naming the feature and both sizes.
    LeRobot    a vector whose `names` are all LeRobot motor keys (`shoulder_pan.pos`, ...: what
    motors     lerobot-record writes for SO-10x, koch, ... arms) is in LeRobot's arm units (degrees,
               gripper 0..100, `use_degrees=True`): its entries are matched to the task's joints by
               name (any order) and converted to rad with `LeRobotUnits` and the task's joint
               limits. Names are the signal, not ranges: a small motion in degrees looks like rad.
               Motor names that are not the task's joints, or no target to convert with, are refused.
               (LeRobot's `use_degrees=False` -100..100 is not told apart from degrees by names.)
    task-side  entries the task declares (`dataset_rescales` on its robot class: `hal.units.Rescale`,
    ranges     e.g. gym_hil's gripper command, 0..255 from the raw env, 0..1 in the task) are kept when
               the dataset's range fits the task's, converted when it fits the environment's, refused
               otherwise.
    ranges     every other entry whose range the task knows (actions: `joint_low/high`; the state of
               a joint-position robot: its joints' limits) must lie within it, give or take 10% of
               its width, else `ImportMismatch: action[3] (a3) spans 0..255 in the dataset; task
               gym_hil takes 0..2`. Everything else (unnamed, no known range) is taken as is.
The dataset's ranges are meta/stats.json's min/max (LeRobot writes them on finalize), or a pass over
the data where a feature has none. Conversions apply to the feature's `next.` twin and to
`complementary_info.policy_action` (an action) too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from hal.units import LeRobotUnits, joint_of
from robo_async.buffer.codec import Schema
from robo_async.buffer.lerobot_io import ImportMismatch, ImportTarget, exported_target

log = logging.getLogger(__name__)
_VECTORS = (("action", "action"), ("state", "observation.state"))  # (our vector, LeRobot feature)
_MARGIN = 0.1  # a dataset may pass a task's range by this fraction of its width (readings past a limit)
Convert = Callable[[np.ndarray], np.ndarray]


def _names(feat: Mapping) -> list[str] | None:
    """A feature's entry names (a list, or LeRobot v2's `{"motors": [...]}`), or None."""
    names = feat.get("names")
    if isinstance(names, Mapping):
        names = next((v for v in names.values() if isinstance(v, list)), None)
    return [str(n) for n in names] if isinstance(names, list) else None


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def _fits(lo: float, hi: float, a: float, b: float) -> bool:
    m = _MARGIN * (b - a)
    return lo >= a - m and hi <= b + m


def _chain(first: Convert | None, then: Convert) -> Convert:
    return then if first is None else lambda v: then(first(v))


def _motor_units(lr: str, names: list[str], joints: tuple[str, ...] | None, target: ImportTarget) -> Convert:
    """LeRobot motor values (degrees, gripper 0..100) in the dataset's order -> rad in the task's."""
    have = [joint_of(n) for n in names]
    if joints is None or sorted(have) != sorted(joints):
        raise ImportMismatch(
            f"{lr} holds LeRobot motors {names} (degrees, gripper 0..100); task {target.task} "
            f"takes " + (f"joints {list(joints)} (rad)" if joints else "no joint positions there")
        )
    order = [have.index(j) for j in joints]
    units = LeRobotUnits([names[i] for i in order], target.spec.joint_low, target.spec.joint_high)
    return lambda v: units.to_hal_array(np.asarray(v)[..., order])


def plan_conversions(
    features: Mapping[str, Mapping], span: Callable[[str], tuple[np.ndarray, np.ndarray] | None], target: ImportTarget
) -> dict[str, Convert]:
    """Per LeRobot feature (`action`, `observation.state`) that needs one, the conversion its values need to fit
    `target` (see the module's docstring), from the dataset's `features` and `span(feature)` (its
    per-entry min and max, None for no frames); `ImportMismatch` for what does not fit."""
    spec, out = target.spec, {}
    joint_state = spec.control_mode == "joint_position" and spec.state_dim == spec.action_dim
    for vector, lr in _VECTORS:
        if lr not in features:
            continue
        n, want = int(np.prod(features[lr]["shape"])), spec.action_dim if vector == "action" else spec.state_dim
        if n != want:
            raise ImportMismatch(
                f"{lr} has {n} values in the dataset; task {target.task} takes {want}"
                + (f" (joints {list(spec.joint_names)})" if vector == "action" else "")
            )
        joints = spec.joint_names if vector == "action" or joint_state else None
        names = _names(features[lr])
        convert: Convert | None = None
        motors = bool(names) and all(k.endswith(".pos") for k in names)  # type: ignore[union-attr]
        if motors:
            convert = _motor_units(lr, names, joints, target)  # type: ignore[arg-type]
        # the ranges the task gives the entries it knows: its joints' limits (rad; gym: its action box)
        ranges = {i: (spec.joint_low[i], spec.joint_high[i]) for i in range(spec.action_dim)} if joints else {}
        rescales = [r for r in target.rescales if r.vector == vector and r.index < n]
        s = span(lr)
        if s is not None:
            lo, hi = (np.asarray(convert(x) if convert else x, np.float64) for x in s)
            for r in rescales:
                i, (a, b) = r.index, r.target
                if _fits(lo[i], hi[i], a, b):
                    continue
                if _fits(lo[i], hi[i], *r.source):
                    log.info(
                        "%s[%d] (%s) spans %s..%s: task %s's environment's range, converted to %s..%s",
                        lr,
                        i,
                        r.name,
                        _fmt(lo[i]),
                        _fmt(hi[i]),
                        target.task,
                        _fmt(a),
                        _fmt(b),
                    )
                    convert = _chain(convert, r.apply)
                    continue
                raise ImportMismatch(
                    f"{lr}[{i}] ({r.name}) spans {_fmt(lo[i])}..{_fmt(hi[i])} in the dataset; task "
                    f"{target.task} takes {_fmt(a)}..{_fmt(b)} (or {_fmt(r.source[0])}.."
                    f"{_fmt(r.source[1])}, which it converts)"
                )
            for i, (a, b) in ranges.items():
                if i in {r.index for r in rescales} or _fits(lo[i], hi[i], a, b):
                    continue
                how = " (converted from LeRobot's degrees and gripper 0..100)" if motors else ""
                raise ImportMismatch(
                    f"{lr}[{i}] ({spec.joint_names[i]}) spans {_fmt(lo[i])}..{_fmt(hi[i])} in the "
                    f"dataset{how}; task {target.task} takes {_fmt(a)}..{_fmt(b)}"
                )
        if convert is not None:
            out[lr] = convert
    return out


def _check_shapes(features: Mapping[str, Mapping], schema: Schema | None, root: Path, motors: bool = False) -> None:
    """Without a task: `action` and `observation.state` against the store's columns, and no LeRobot
    motor units (there are no joint limits to convert them with) unless `motors` (our own export,
    which keeps them)."""
    cols = {c.name: c for c in schema.columns} if schema is not None else {}
    for ours, lr in (("action", "action"), ("obs/state", "observation.state")):
        if lr not in features:
            continue
        names = _names(features[lr])
        if names and all(k.endswith(".pos") for k in names) and not motors:
            raise ImportMismatch(
                f"{lr} of {root} holds LeRobot motors {names} (degrees, gripper 0..100); import it "
                f"into a run (buffer.imports) so that it is converted with the task's joint limits"
            )
        n = int(np.prod(features[lr]["shape"]))
        if ours in cols and n != int(np.prod(cols[ours].shape or (1,))):
            raise ImportMismatch(f"{lr} has {n} values in the dataset; the store's {ours} takes {cols[ours].shape}")


def _span_of(ds, lr: str) -> tuple[np.ndarray, np.ndarray] | None:
    """A feature's per-entry (min, max): meta/stats.json's, else a pass over the frames; None without frames."""
    n = int(np.prod(ds.features[lr]["shape"]))
    st = (ds.meta.stats or {}).get(lr) or {}
    if "min" in st and "max" in st:
        lo, hi = (np.asarray(st[k], np.float64).reshape(-1) for k in ("min", "max"))
        if lo.shape == hi.shape == (n,) and np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)):
            return lo, hi
    if len(ds.hf_dataset) == 0:
        return None
    v = np.asarray(ds.hf_dataset.with_format("numpy")[lr], np.float64).reshape(-1, n)
    return v.min(axis=0), v.max(axis=0)


def read_lerobot(
    root: Path, schema: Schema | None = None, target: ImportTarget | None = None
) -> Iterator[dict[str, np.ndarray | np.generic]]:
    """Transitions (one dict per frame, our column names) from a LeRobotDataset at `root`,
    shaped to `schema` when given (missing columns raise ValueError naming them); without a
    schema, scalar columns are numpy scalars. With a `target` (the task imported into) the
    action and state are converted to fit it or refused (`ImportMismatch`, see the module's
    docstring), before any row is read."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/import", root=root, video_backend="pyav")
    feats = ds.features
    if target is None:
        target = exported_target(root, ds.fps)  # an export of ours in LeRobot's units: back to rad
        _check_shapes(feats, schema, root, motors=target is not None)
    convert = {} if target is None else plan_conversions(feats, lambda lr: _span_of(ds, lr), target)
    for lr in list(convert):  # the same conversion for the next observation and the policy's action
        twin = "complementary_info.policy_action" if lr == "action" else "next." + lr
        convert[twin] = convert[lr]
    ours: dict[str, str] = {}  # our name -> lerobot name for observations
    for name in feats:
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
            raise ValueError(
                f"dataset {root} has observations {sorted(ours.values())}; this store also "
                f"needs {sorted(missing)} (LeRobot names: observation.<name> or "
                f"observation.images.<camera>)"
            )
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
            row[k] = _np(cur[lr], feats[lr], convert.get(lr))
            nk = "next." + lr
            row["next_" + k] = (
                _np(cur[nk], feats[nk], convert.get(nk)) if nk in cur else _np(nxt[lr], feats[lr], convert.get(lr))
            )
        row["action"] = _np(cur["action"], feats["action"], convert.get("action")).astype(np.float32)
        row["reward"] = np.float32(_scalar(cur, "next.reward", 0.0))
        done = bool(_scalar(cur, "next.done", False))
        row["terminated"] = np.bool_(done)
        row["truncated"] = np.bool_(_scalar(cur, "next.truncated", last and not done))
        row["success"] = np.bool_(_scalar(cur, "next.success", False))
        row["policy_version"] = np.int64(_scalar(cur, "complementary_info.policy_version", -1))
        row["intervention"] = np.uint8(_scalar(cur, "complementary_info.intervention", 0))
        pa = "complementary_info.policy_action"
        row["policy_action"] = (
            _np(cur[pa], feats[pa], convert.get(pa)).astype(np.float32) if pa in cur else row["action"]
        )
        yield (
            row
            if schema is None
            else {
                c.name: np.asarray(row[c.name], dtype=c.dtype).reshape(c.shape) for c in schema.columns if c.name in row
            }
        )


def _scalar(item: dict, key: str, default: float | bool) -> float | bool:
    if key not in item:
        return default
    v = item[key]
    return v.item() if hasattr(v, "item") else v


def _np(value: object, feat: dict, convert: Convert | None = None) -> np.ndarray:
    """A LeRobot value (torch tensor, images as float C x H x W in [0, 1]) as our numpy array, in the
    task's units with `convert`."""
    a = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    if convert is not None:
        return convert(a)
    if feat["dtype"] in ("image", "video"):
        if a.ndim == 3 and a.shape[0] in (1, 3, 4) and a.shape[-1] not in (1, 3, 4):
            a = np.transpose(a, (1, 2, 0))
        if a.dtype != np.uint8:
            a = np.clip(np.rint(a * 255.0), 0, 255).astype(np.uint8)
    return a
