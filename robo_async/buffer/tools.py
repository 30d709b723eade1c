"""Store-level tools behind `robo-async buffer ...`: inspect a store, import earlier data into it, export it."""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np

from policies.embedding import FrozenEncoder, show_version
from policies.reward import SuccessClassifier
from robo_async.buffer.codec import decode_batch_frames
from robo_async.buffer.embeddings import embed_batch
from robo_async.buffer.lerobot_io import ImportTarget
from robo_async.buffer.lmdb_store import TABLES, PersistentReplayStore
from robo_async.transport.wire import Frames, TransitionBatch

IMPORT_ACTOR_BASE = 1 << 40  # imported data is numbered apart from live actors (ids below this)


def is_store(path: Path) -> bool:
    """Whether `path` is a replay store directory (holds LMDB's data.mdb)."""
    return (path / "data.mdb").exists()


def is_lerobot(path: Path) -> bool:
    """Whether `path` is a LeRobotDataset (holds meta/info.json)."""
    return (path / "meta" / "info.json").exists()


def store_path(path: Path) -> Path:
    """A run directory or a store directory -> the store directory."""
    return path / "replay" if is_store(path / "replay") else path


def inspect(path: Path) -> str:
    """A readable report of the store at `path` (a run or store directory), opened read-only:
    schema, per table its rows, episodes, success rate and actors, what retention evicted, damage."""
    store = PersistentReplayStore(store_path(path)).open(readonly=True)
    try:
        lines = [f"replay store {store.path}"]
        if store.schema is None:
            return lines[0] + ": empty"
        lines.append(f"{'table':<14}{'transitions':>12}{'episodes':>10}{'success':>9}{'actors':>8}")
        for t in TABLES:
            eps = succ = 0
            ep_success: dict[int, bool] = {}  # per actor: the episode under way succeeded so far
            for _, actor, _, row in store.records(t):
                won = ep_success.get(actor, False) or bool(row.get("success", row["terminated"]))
                ep_success[actor] = won
                if row["terminated"] or row["truncated"]:
                    eps += 1
                    succ += won
                    ep_success[actor] = False
            rate = f"{succ / eps:.0%}" if eps else "-"
            gone = f"  ({store.first[t]:,} older evicted by retention)" if store.first[t] else ""
            lines.append(f"{t:<14}{store.live(t):>12,}{eps:>10,}{rate:>9}{len(ep_success):>8}{gone}")
        cols = ", ".join(f"{c.name} {c.describe()}" for c in store.schema.columns)
        versions = store.embedding_versions()
        if versions:  # stored embeddings of a frozen camera encoder (buffer/embeddings.py)
            lines.append(
                "embeddings: " + ", ".join(f"encoder {show_version(v)} {n:,} rows" for v, n in sorted(versions.items()))
            )
        last = store.last_commit()
        lines += [
            f"columns: {cols}",
            f"disk: {store.disk_bytes() / 2**20:.1f} MiB",
            "last commit: "
            + (dt.datetime.fromtimestamp(last).isoformat(sep=" ", timespec="seconds") if last else "never"),
        ]
        if store.repaired or store.corrupt_records:
            lines.append(f"damage: {'; '.join(store.repaired)} {store.corrupt_records} damaged record(s) skipped")
        return "\n".join(lines)
    finally:
        store.close()


def _batches(
    rows: Iterator[tuple[int, Mapping[str, np.ndarray | np.generic]]], size: int = 256
) -> Iterator[TransitionBatch]:
    """Group (actor_id, row) into contiguous per-actor batches numbered 0, 1, 2, ... per actor
    (each column stacked: a row's numpy scalars become a 1-d column)."""
    pending: dict[int, list[Mapping[str, np.ndarray | np.generic]]] = {}
    seqs: dict[int, int] = {}

    def emit(actor: int) -> TransitionBatch:
        rs = pending.pop(actor)
        b = TransitionBatch(actor, seqs.get(actor, 0), {k: np.stack([r[k] for r in rs]) for k in rs[0]})
        seqs[actor] = b.seq + len(rs)
        return b

    for actor, row in rows:
        pending.setdefault(actor, []).append(row)
        if len(pending[actor]) >= size:
            yield emit(actor)
    for actor in list(pending):
        yield emit(actor)


def classifier_outcomes(batch: TransitionBatch, classifier: SuccessClassifier) -> TransitionBatch:
    """`batch` with reward, success and termination from a success classifier on its next
    observations' frames (as `ClassifierReward` gives them online: reward 1 and the episode's end
    where p >= threshold, else 0): imported data then carries the run's reward, not its source's."""
    names = [f"next_obs/{c}" for c in classifier.meta.cameras]
    missing = [k for k in names if k not in batch.arrays]
    if missing:
        raise ValueError(f"the reward classifier reads {missing}, which the imported rows lack")
    encoded = [k for k in names if isinstance(batch.arrays[k], Frames)]
    decoded = decode_batch_frames(batch.arrays, encoded) if encoded else {}
    frames = {c: decoded.get(k, batch.arrays[k]) for c, k in zip(classifier.meta.cameras, names, strict=False)}
    won = classifier.probability(frames) >= classifier.meta.threshold
    return TransitionBatch(
        batch.actor_id, batch.seq, {**batch.arrays, "reward": won.astype(np.float32), "success": won, "terminated": won}
    )


def import_source(
    store: PersistentReplayStore,
    source: Path,
    table: str,
    progress: Callable[[int], None] | None = None,
    embed: bool = False,
    encoder: FrozenEncoder | None = None,
    classifier: SuccessClassifier | None = None,
    target: ImportTarget | None = None,
) -> int:
    """Copy an earlier run's store or a LeRobotDataset into `table`. Idempotent: importing the
    same source again adds nothing (its transitions keep stable ids). Returns transitions added.
    `embed`: the rows get the embeddings of `encoder` (re-encoded where another version made
    them; `encoder` None: embedding columns are left out), as a run with that encoder stores them.
    `classifier`: rewards and successes are the classifier's (`classifier_outcomes`).
    `target`: the task the rows are for; a LeRobotDataset is converted to its units or refused
    (`ImportMismatch`, before anything is stored; see `lerobot_io`). Without one, a dataset in
    LeRobot's motor units is refused (no joint limits to convert with)."""
    from robo_async.buffer.lerobot_import import read_lerobot

    source = store_path(Path(source))
    tag = IMPORT_ACTOR_BASE + (zlib.crc32(str(source.resolve()).encode()) % (1 << 16)) * (1 << 8)
    rows: Iterator[tuple[int, Mapping[str, np.ndarray | np.generic]]]
    if is_store(source):
        src = PersistentReplayStore(source).open(readonly=True)
        rows = ((tag + a % 256, row) for t in TABLES for _, a, _, row in src.records(t))
    elif is_lerobot(source):
        src = None
        rows = ((tag, row) for row in read_lerobot(source, store.schema, target))
    else:
        raise FileNotFoundError(f"{source} is neither a replay store (data.mdb) nor a LeRobot dataset (meta/info.json)")
    added = 0
    try:
        for b in _batches(rows):
            if embed:
                b = embed_batch(b, encoder)[0]
            if classifier is not None:
                b = classifier_outcomes(b, classifier)
            added += store.insert(b, table)
            if progress:
                progress(added)
        store.flush()
    finally:
        if src is not None:
            src.close()
    return added


def export(
    path: Path,
    out: Path,
    table: str = "online",
    task: str | None = None,
    fps: int | None = None,
    videos: bool = False,
    target: ImportTarget | None = None,
) -> tuple[int, int]:
    """Write `table` of the store at `path` as a LeRobotDataset at `out` (`task` and `fps` from the run's
    config.yaml when not given); with `target` (the rows' task: `robo_async.launch.tasks.import_target`) joint
    positions in
    LeRobot's names and units (see `lerobot_io`). Returns (episodes, frames)."""
    from robo_async.buffer.lerobot_io import export_lerobot

    path = Path(path)
    run_cfg = path / "config.yaml"
    if (task is None or fps is None) and run_cfg.exists():  # a run directory knows its task and rate
        import yaml

        cfg = yaml.safe_load(run_cfg.read_text())
        task = task or cfg["task"]["name"]
        fps = fps or int(cfg["task"]["hz"])
    store = PersistentReplayStore(store_path(path)).open(readonly=True)
    try:
        if store.schema is None or store.counts[table] == 0:
            raise ValueError(f"table '{table}' of {store.path} is empty")
        rows = ((a, row) for _, a, _, row in store.records(table))
        return export_lerobot(
            rows, store.schema, Path(out), task=task or "task", fps=fps or 30, videos=videos, target=target
        )
    finally:
        store.close()
