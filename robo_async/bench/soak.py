"""`robo-async bench soak`: a training job with real-time actors (local launcher, its own
processes) under chaos for `minutes`: random `kill -9` of the learner and of actors, and TCP
connections between actors and the learner cut (`ss -K`, where the kernel allows it), and the store's
disk filled to below `buffer.disk_min_gb` for `fill_s` (a file allocated beside the store; the
thresholds are set a few GB under what is free at the start, so no real disk gets full). The online
table is kept to `keep_rows` rows by retention, evicted rows archived to a second store. At the end
every actor's seqs in the store and the archive are checked: lost (gaps) and duplicated; recoveries are read from
`supervisor.jsonl`; each process's anonymous RSS is sampled every few seconds and its slope fitted
(processes that lived `rss_min_minutes` or more; the last `calm` share of the run has no chaos).

    robo-async bench soak [minutes=20] [actors=4] [every_s=45] [keep_rows=30000] [cache_mb=64] [dir=...]
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from robo_async.bench import register


def _rss_mb(pid: int) -> float | None:
    """Anonymous resident memory (RssAnon): what a leak grows. File-backed pages (the LMDB map,
    shared libraries) come and go with the page cache and are not counted."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _children_rss(pid: int) -> float:
    """RSS of a process plus its children (an actor's inference or a learner's helpers)."""
    total = _rss_mb(pid) or 0.0
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return total + sum(_rss_mb(int(k)) or 0.0 for k in kids)


def _cut_connections(port: int) -> bool:
    """Kill the TCP sockets on a learner port (actors see a dropped link and reconnect)."""
    res = subprocess.run(["ss", "-K", f"( sport = :{port} or dport = :{port} )"], capture_output=True, text=True)
    return res.returncode == 0


def _fill_disk(path: Path, root: Path, leave_gb: float) -> bool:
    """Allocate a file so that only `leave_gb` stays free on root's disk (fallocate: instant)."""
    need = shutil.disk_usage(root).free - leave_gb * 2**30
    if need <= 0:
        return False
    res = subprocess.run(["fallocate", "-l", str(int(need)), str(path)], capture_output=True)
    return res.returncode == 0


@register("soak")
def bench_soak(args: dict[str, str]) -> int:
    minutes = float(args.get("minutes", 20))
    actors = int(args.get("actors", 4))
    every_s = float(args.get("every_s", 45))
    root = Path(args.get("dir") or tempfile.mkdtemp(prefix="soak-"))
    run_dir = root / "run"
    root.mkdir(parents=True, exist_ok=True)
    fill_s = float(args.get("fill_s", 20))
    keep_rows = int(args.get("keep_rows", 30000))
    # the last `calm` of the run has no chaos: the processes then live long enough for an RSS slope
    calm = float(args.get("calm", 1 / 3))
    judge_min = float(args.get("rss_min_minutes", 4))  # a process's slope counts if sampled this long
    cache_mb = int(args.get("cache_mb", 64))
    free0 = shutil.disk_usage(root).free / 2**30
    disk_min = free0 - 5 if free0 > 12 else None  # a "nearly full disk" a few GB below what is free now
    fill = root / "disk-filler"
    rng = random.Random(int(args.get("seed", 0)))
    cmd = [sys.executable, "-m", "robo_async.cli", "train", f"run_dir={run_dir}", f"actors={actors}",
           "task.realtime=true", f"budget.seconds={minutes * 60:.0f}", "stop_at_success=null", "eval_episodes=0",
           "launcher.supervise.restarts=1000", "launcher.supervise.backoff_s=0.5", "launcher.supervise.max_backoff_s=2",
           "learner.checkpoint_every_s=10", "policy.hidden=[64,64]", "algo.hidden=[64,64]", "algo.batch_size=64",
           "dashboard.port=null",
           # retention under chaos: the online table kept to `keep_rows` (evicted rows archived to a second
           # store, so every row can still be counted) and a small RAM cache, so the learner reaches its
           # steady size early and the RSS slope measures leaks rather than the cache filling up
           f"buffer.max_rows.online={keep_rows}", f"buffer.archive_dir={root / 'archive'}",
           f"buffer.cache_mb={cache_mb}"]
    if disk_min is not None:
        cmd += [f"buffer.disk_min_gb={disk_min:.1f}", f"buffer.disk_warn_gb={disk_min + 2:.1f}"]
    print(f"soak: {actors} real-time actors for {minutes:.0f} min, chaos every ~{every_s:.0f} s; run in {run_dir}",
          flush=True)
    # the job's output goes straight to a file: a pipe read only at the end fills (64 KiB) within the
    # hour, and the launcher, blocked writing to it, stops supervising (a 60-minute soak stalled so)
    log_path = root / "train.log"
    log_file = open(log_path, "w")  # noqa: SIM115 - closed after the job ends
    proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, text=True)
    pids_file = run_dir / "processes.json"
    t0 = time.monotonic()
    while not pids_file.exists() and proc.poll() is None and time.monotonic() - t0 < 180:
        time.sleep(0.5)
    rss: dict[str, list[tuple[float, float]]] = {}  # "<who> pid" -> [(hours, MB)]
    chaos: list[dict] = []
    cuts_ok = None
    fills = 0
    next_chaos = time.monotonic() + every_s * rng.uniform(0.5, 1.5)
    next_rss = time.monotonic()
    end = t0 + minutes * 60
    fill_until = None
    try:
        while proc.poll() is None and time.monotonic() < end + 120:
            now = time.monotonic()
            try:
                pids = json.loads(pids_file.read_text())
            except (OSError, json.JSONDecodeError):
                pids = {}
            if now >= next_rss:
                next_rss = now + 5
                for who, pid in pids.items():
                    mb = _children_rss(pid)
                    if mb:
                        rss.setdefault(f"{who} {pid}", []).append(((now - t0) / 3600, mb))
            if fill_until is not None and now >= fill_until:
                fill.unlink(missing_ok=True)
                fill_until = None
                print(f"  t={now - t0:>6.0f} s  disk space given back", flush=True)
            if now >= next_chaos and now < t0 + minutes * 60 * (1 - calm):
                next_chaos = now + every_s * rng.uniform(0.5, 1.5)
                actions = ["kill learner", "kill actor", "cut links"] + (["fill disk"] if disk_min is not None else [])
                action = rng.choice(actions)
                who = rng.choice([w for w in pids if w != "learner"] or ["learner"]) if action == "kill actor" \
                    else "store" if action == "fill disk" else "learner"
                ev = {"t": round(now - t0, 1), "action": action, "who": who}
                if action == "cut links":
                    try:
                        port = int(json.loads((run_dir / "addresses.json").read_text())[0].rsplit(":", 1)[1])
                    except (OSError, ValueError, IndexError, json.JSONDecodeError):
                        port = 0
                    ok = bool(port) and _cut_connections(port)
                    cuts_ok = ok if cuts_ok is None else (cuts_ok or ok)
                    ev["done"] = ok
                elif action == "fill disk":
                    ev["done"] = fill_until is None and _fill_disk(fill, root, disk_min - 1)
                    if ev["done"]:
                        fill_until = now + fill_s
                        fills += 1
                elif who in pids:
                    try:
                        os.kill(pids[who], signal.SIGKILL)
                        ev["done"] = True
                    except ProcessLookupError:
                        ev["done"] = False
                chaos.append(ev)
                print(f"  t={ev['t']:>6.0f} s  {action} ({who}): {'done' if ev.get('done') else 'not possible'}",
                      flush=True)
            time.sleep(0.5)
    finally:
        fill.unlink(missing_ok=True)
    proc.wait(timeout=300)
    log_file.close()
    out = log_path.read_text()

    from robo_async.buffer.lmdb_store import PersistentReplayStore
    from robo_async.launch.supervisor import read_events
    from robo_async.learner.metrics import read_metrics

    seqs: dict[int, list[int]] = {}
    held = {}
    for name, path in (("store", run_dir / "replay"), ("archive", root / "archive")):
        if not path.exists():
            continue
        store = PersistentReplayStore(path).open(readonly=True)
        held[name] = 0
        for _, a, q, _ in store.records("online"):
            seqs.setdefault(a, []).append(q)
            held[name] += 1
        store.close()
    stored = sum(len(v) for v in seqs.values())
    duplicated = sum(len(v) - len(set(v)) for v in seqs.values())
    produced = sum(max(v) + 1 for v in seqs.values() if v)  # every seq below an actor's newest was produced
    lost = produced - (stored - duplicated)
    events = read_events(run_dir)
    recover = []
    for i, e in enumerate(events):
        if e["event"] == "failed" and e["who"] == "learner":
            back = next((x for x in events[i + 1:] if x["event"] == "ready" and x["who"] == "learner"), None)
            if back is not None:
                recover.append(back["t"] - e["t"])
    restarts = sum(e["event"] in ("restarted",) for e in events)
    rows = read_metrics(run_dir)
    missed = max((r.get("actors/missed_ticks", 0) for r in rows), default=0)
    slopes = {}
    for key, series in rss.items():
        if len(series) >= 6 and series[-1][0] - series[0][0] > judge_min / 60:
            h, mb = np.array(series).T
            half = len(h) // 3  # skip the warm-up third (imports, caches filling)
            slopes[key] = float(np.polyfit(h[half:], mb[half:], 1)[0])
    print(f"{'produced':>10}{'stored':>10}{'lost':>6}{'dup':>6}{'restarts':>10}{'recover mean/max s':>20}"
          f"{'missed ticks':>14}{'RSS slope max MB/h':>20}")
    print(f"{produced:>10,}{stored:>10,}{lost:>6}{duplicated:>6}{restarts:>10}"
          f"{(np.mean(recover) if recover else 0):>11.1f}/{(max(recover) if recover else 0):<8.1f}{int(missed):>14}"
          f"{(max(slopes.values()) if slopes else 0):>20.1f}")
    result = {
        "minutes": minutes, "actors": actors, "produced": produced, "stored": stored, "lost": lost,
        "duplicated": duplicated, "in_store": held.get("store", 0), "archived": held.get("archive", 0),
        "restarts": restarts, "learner_recoveries": len(recover),
        "recover_mean_s": round(float(np.mean(recover)), 2) if recover else None,
        "recover_max_s": round(float(max(recover)), 2) if recover else None,
        "missed_ticks": int(missed), "ticks_learner_away": int(max((r.get("actors/ticks_learner_away", 0)
                                                                   for r in rows), default=0)),
        "rss_slope_mb_per_h": {k: round(v, 1) for k, v in slopes.items()},
        "rss_slope_mb_per_h_max": round(max(slopes.values()), 1) if slopes else None,
        "chaos": chaos, "link_cuts_possible": cuts_ok,
        "disk_fills": fills, "disk_pauses_logged": out.count("new data is NOT accepted"),
        "disk_min_free_gb_seen": round(min((r.get("buffer/disk_free_gb", 1e9) for r in rows), default=0), 1),
        "run_dir": str(run_dir),
    }
    print(json.dumps(result))
    return 0
