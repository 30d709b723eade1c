"""What a run of `robo-async bench chaos` or `bench soak` left, counted once it is over: every
actor's rows in the store's online table and in its archive (`count_rows`: produced, stored, lost,
duplicated, and rows under the hostile peer's ids), how long the learner took to come back after
each failure (`learner_recoveries`, from the launcher's events), and each process's RSS slope
(`rss_slopes`, MB/h)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robo_async.bench.judge import HOSTILE_ID


def count_rows(store: Path, archive: Path) -> dict[str, int]:
    """Every actor's seqs in the online table of `store` and of `archive`: `produced` (every seq below
    an actor's newest was produced), `stored`, `duplicated`, `lost` (produced but not stored),
    the rows each holds (`in_store`, `archived`) and `hostile_rows` (ids from HOSTILE_ID up, not
    counted in the others)."""
    from robo_async.buffer.lmdb_store import PersistentReplayStore

    seqs: dict[int, list[int]] = {}
    held = {}
    for name, path in (("store", store), ("archive", archive)):
        if not path.exists():
            continue
        s = PersistentReplayStore(path).open(readonly=True)
        held[name] = 0
        for _, a, q, _ in s.records("online"):
            seqs.setdefault(a, []).append(q)
            held[name] += 1
        s.close()
    hostile_rows = sum(len(v) for a, v in seqs.items() if a >= HOSTILE_ID)
    seqs = {a: v for a, v in seqs.items() if a < HOSTILE_ID}
    stored = sum(len(v) for v in seqs.values())
    duplicated = sum(len(v) - len(set(v)) for v in seqs.values())
    produced = sum(max(v) + 1 for v in seqs.values() if v)  # every seq below an actor's newest was produced
    return {
        "produced": produced,
        "stored": stored,
        "lost": produced - (stored - duplicated),
        "duplicated": duplicated,
        "in_store": held.get("store", 0),
        "archived": held.get("archive", 0),
        "hostile_rows": hostile_rows,
    }


def learner_recoveries(events: list[dict]) -> list[float]:
    """Seconds from each learner failure to its next `ready` (failures it never came back from left out)."""
    recover = []
    for i, e in enumerate(events):
        if e["event"] == "failed" and e["who"] == "learner":
            back = next((x for x in events[i + 1 :] if x["event"] == "ready" and x["who"] == "learner"), None)
            if back is not None:
                recover.append(back["t"] - e["t"])
    return recover


def rss_slopes(rss: dict[str, list[tuple[float, float]]], min_minutes: float) -> dict[str, float]:
    """Per process ("<who> pid" -> [(hours, MB)]), the slope of its RSS in MB/h, fitted after its
    warm-up third (imports, caches filling); a process sampled under `min_minutes` is left out."""
    slopes = {}
    for key, series in rss.items():
        if len(series) >= 6 and series[-1][0] - series[0][0] > min_minutes / 60:
            h, mb = np.array(series).T
            half = len(h) // 3  # skip the warm-up third (imports, caches filling)
            slopes[key] = float(np.polyfit(h[half:], mb[half:], 1)[0])
    return slopes
