"""`robo-async bench chaos` and `bench soak`: a training job with real-time actors (local launcher,
its own processes) under chaos for `minutes`, then every actor's rows counted.

`bench chaos` (issue 37): 3 actors on CURVE links, each actor's links to the learner through a TCP
relay (`bench.netem.LinkProxy`, named to the actors by `transport.advertise`); every ~`every_s`
one of: `kill -9` of the learner, `kill -9` of an actor, SIGSTOP of an actor for `stop_s` then
SIGCONT, one actor's link dropped for `drop_s` (bytes stop both ways, TCP stays up). All the while a
hostile peer with a valid key of its own sends `hostile_rate` messages a second (`bench.hostile`:
mutants of every kind, the 88-byte message, NaN batches, batches and gaps forged under the real
actors' ids, floods of frames) and keeps a subscriber that never reads. A subscriber of our own
records when the learner's acks of each actor move: a healthy actor's longest wait between acks
(`max_ack_stall_s`) leaves out the gaps that overlap chaos aimed at that actor or at the learner.
`crashes_from_messages` counts processes that died by anything but our kill -9 (or, for a stopped
actor, the supervisor's hang kill).

`bench soak` (issue 28): 4 actors; kill -9 of the learner and of actors, TCP connections cut
(`ss -K`, where the kernel allows it), the store's disk filled to below `buffer.disk_min_gb` for
`fill_s` (a file beside the store; thresholds a few GB under what is free, so no disk gets full).

Both: the online table kept to `keep_rows` rows by retention, evicted rows archived to a second
store; at the end each actor's seqs in the store and the archive give lost (gaps) and duplicated;
each process's anonymous RSS is sampled every few seconds and its slope fitted (processes that lived
`rss_min_minutes` or more; the last `calm` share of the run has no chaos). Last line: JSON.

What the chaos does to processes, links and disks is in `bench.chaos_acts`; how the run is judged
(hits, acks, stalls, crashes) in `bench.judge`; what it left, counted, in `bench.chaos_count`. Here:
the keys, the job started, the hits dealt over the run, and the report.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robo_async.bench import emit, register
from robo_async.bench.chaos_acts import cut_connections, family, family_rss, fill_disk, free_port, send_signal
from robo_async.bench.chaos_count import count_rows, learner_recoveries, rss_slopes
from robo_async.bench.judge import HOSTILE_ID, OBSERVER_ID, Hit, _observe, ack_stalls, crashes, plot, total, victim_wait
from robo_async.commands.args import arg


@dataclass(frozen=True)
class Kind:
    """A chaos bench: its name, the chaos it deals, and whether it runs on CURVE links through the
    link relay with the hostile peer and the ack observer (its defaults: its keys' dataclass)."""

    name: str
    actions: tuple[str, ...]
    hostile: bool


SOAK = Kind("soak", ("kill learner", "kill actor", "cut links", "fill disk"), False)
CHAOS = Kind("chaos", ("kill learner", "kill actor", "stop actor", "drop link"), True)


@dataclass(frozen=True, kw_only=True)
class ChaosKeys:
    """The keys of `robo-async bench chaos` (and, with its own defaults, `bench soak`)."""

    minutes: float = arg(60.0, help="length of the run under chaos, minutes")
    actors: int = arg(3, help="real-time actors")
    every_s: float = arg(40.0, help="mean seconds between two hits")
    stop_s: float = arg(20.0, help="how long a stopped actor stays stopped (SIGSTOP), s")
    drop_s: float = arg(10.0, help="how long a dropped link stays down, s")
    fill_s: float = arg(20.0, help="how long the store's disk stays filled (soak), s")
    keep_rows: int = arg(30000, help="rows the online table keeps (retention; the rest archived)")
    calm: float = arg(1 / 3, help="last share of the run without chaos (so an RSS slope can be fitted)")
    rss_min_minutes: float = arg(4.0, help="a process's RSS slope counts if it was sampled this long, minutes")
    cache_mb: int = arg(64, help="the learner's in-RAM cache, MB (buffer.cache_mb)")
    hostile_rate: float = arg(100.0, help="messages/s of the hostile peer (chaos)")
    seed: int = arg(0, help="seed of the hits and of the hostile peer's mutants")
    dir: Path | None = arg(None, help="working directory (none: a new temporary one)")


@dataclass(frozen=True, kw_only=True)
class SoakKeys(ChaosKeys):
    """The keys of `robo-async bench soak`: `bench chaos`'s, with the soak's defaults."""

    minutes: float = arg(20.0, help="length of the run under chaos, minutes")
    actors: int = arg(4, help="real-time actors")
    every_s: float = arg(45.0, help="mean seconds between two hits")


@register("soak", SoakKeys)
def bench_soak(args: SoakKeys) -> int:
    return run(SOAK, args)


@register("chaos", ChaosKeys)
def bench_chaos(args: ChaosKeys) -> int:
    return run(CHAOS, args)


def run(kind: Kind, args: ChaosKeys) -> int:
    from robo_async.bench.hostile import HostilePeer
    from robo_async.bench.netem import LinkProxy
    from robo_async.transport.curve import create_keys

    minutes, actors, every_s = args.minutes, args.actors, args.every_s
    stop_s, drop_s = args.stop_s, args.drop_s
    root = Path(args.dir or tempfile.mkdtemp(prefix=f"{kind.name}-"))
    run_dir = root / "run"
    root.mkdir(parents=True, exist_ok=True)
    fill_s = args.fill_s
    keep_rows = args.keep_rows
    calm = args.calm  # the last third: no chaos, so processes live long enough for a slope
    judge_min = args.rss_min_minutes  # a process's slope counts if sampled this long
    cache_mb = args.cache_mb
    free0 = shutil.disk_usage(root).free / 2**30
    disk_min = free0 - 5 if free0 > 12 and "fill disk" in kind.actions else None
    fill = root / "disk-filler"
    rng = random.Random(args.seed)
    cmd = [
        sys.executable,
        "-m",
        "robo_async.cli",
        "train",
        f"run_dir={run_dir}",
        f"actors={actors}",
        "task.realtime=true",
        f"budget.seconds={minutes * 60:.0f}",
        "stop_at_success=null",
        "eval_episodes=0",
        "launcher.supervise.restarts=1000",
        "launcher.supervise.backoff_s=0.5",
        "launcher.supervise.max_backoff_s=2",
        "learner.checkpoint_every_s=10",
        "policy.hidden=[64,64]",
        "algo.hidden=[64,64]",
        "algo.batch_size=64",
        "dashboard.port=null",
        # retention under chaos: the online table kept to `keep_rows` (evicted rows archived to a second
        # store, so every row can still be counted) and a small RAM cache, so the learner reaches its
        # steady size early and the RSS slope measures leaks rather than the cache filling up
        f"buffer.max_rows.online={keep_rows}",
        f"buffer.archive_dir={root / 'archive'}",
        f"buffer.cache_mb={cache_mb}",
    ]
    if disk_min is not None:
        cmd += [f"buffer.disk_min_gb={disk_min:.1f}", f"buffer.disk_warn_gb={disk_min + 2:.1f}"]
    keys_dir = None
    proxy = None
    if kind.hostile:
        keys_dir = str(root / "keys")
        create_keys(Path(keys_dir), [*range(actors), HOSTILE_ID, OBSERVER_ID])
        ports = free_port(), free_port()
        proxy = LinkProxy([f"tcp://127.0.0.1:{p}" for p in ports])
        fronts = proxy.__enter__()
        cmd += [
            f"transport.keys={keys_dir}",
            f"transport.data_port={ports[0]}",
            f"transport.weights_port={ports[1]}",
            f"transport.advertise=['{fronts[0]}','{fronts[1]}']",
        ]
    print(
        f"{kind.name}: {actors} real-time actors for {minutes:.0f} min, chaos every ~{every_s:.0f} s "
        f"({', '.join(kind.actions)}){'; a hostile peer' if kind.hostile else ''}; run in {run_dir}",
        flush=True,
    )
    # the job's output goes straight to a file: a pipe read only at the end fills (64 KiB) within the
    # hour, and the launcher, blocked writing to it, stops supervising (a 60-minute soak stalled so)
    log_path = root / "train.log"
    log_file = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, text=True)
    pids_file = run_dir / "processes.json"
    t0 = time.monotonic()
    while not pids_file.exists() and proc.poll() is None and time.monotonic() - t0 < 180:
        time.sleep(0.5)
    rss: dict[str, list[tuple[float, float]]] = {}  # "<who> pid" -> [(hours, MB)]
    hits: list[Hit] = []
    acks: dict[int, list[float]] = {}
    watching = threading.Event()
    hostile = None
    if kind.hostile and (run_dir / "addresses.json").exists():
        data, weights = json.loads((run_dir / "addresses.json").read_text())
        hostile = HostilePeer(
            data,
            weights,
            keys_dir,
            HOSTILE_ID,
            list(range(actors)),
            rate=args.hostile_rate,
            seed=args.seed,
        )
        hostile.__enter__()
        threading.Thread(target=_observe, args=(weights, keys_dir, watching, acks), daemon=True).start()
    cuts_ok = None
    fills = 0
    next_chaos = time.monotonic() + every_s * rng.uniform(0.5, 1.5)
    next_rss = time.monotonic()
    end = t0 + minutes * 60
    fill_until = None
    active: Hit | None = None  # a stop or a drop under way (one hit at a time)
    ready_seen = 0
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
                    mb = family_rss(pid)
                    if mb:
                        rss.setdefault(f"{who} {pid}", []).append(((now - t0) / 3600, mb))
            if fill_until is not None and now >= fill_until:
                fill.unlink(missing_ok=True)
                fill_until = None
                print(f"  t={now - t0:>6.0f} s  disk space given back", flush=True)
            from robo_async.launch.restarts import read_events

            readies = [e for e in read_events(run_dir) if e["event"] == "ready" and e["who"] == "learner"]
            for _ in readies[ready_seen:]:  # a learner restart's effect ends when it is back
                for h in hits:
                    if h.actor is None and h.end is None:
                        h.end = now
            ready_seen = len(readies)
            if active is not None and active.end is not None and now >= active.end:
                if active.action == "stop actor":
                    for p in active.pids:
                        send_signal(p, signal.SIGCONT)
                print(f"  t={now - t0:>6.0f} s  {active.action} (actor {active.actor}) over", flush=True)
                active = None
                next_chaos = max(next_chaos, now + every_s * rng.uniform(0.5, 1.0))
            if active is None and now >= next_chaos and now < t0 + minutes * 60 * (1 - calm):
                next_chaos = now + every_s * rng.uniform(0.5, 1.5)
                action = rng.choice([a for a in kind.actions if a != "fill disk" or disk_min is not None])
                on_actor = action in ("kill actor", "stop actor", "drop link")
                who = rng.choice([w for w in pids if w.startswith("actor")] or ["learner"]) if on_actor else "learner"
                hit = Hit(now, action, int(who.split()[1]) if who.startswith("actor") else None)
                pid = pids.get(who)
                if action == "cut links":
                    try:
                        port = int(json.loads((run_dir / "addresses.json").read_text())[0].rsplit(":", 1)[1])
                    except (OSError, ValueError, IndexError, json.JSONDecodeError):
                        port = 0
                    hit.done = bool(port) and cut_connections(port)
                    cuts_ok = hit.done if cuts_ok is None else (cuts_ok or hit.done)
                    hit.end = now
                elif action == "fill disk":
                    hit.done = fill_until is None and fill_disk(fill, root, disk_min - 1)  # type: ignore[operator]
                    if hit.done:
                        fill_until = hit.end = now + fill_s
                        fills += 1
                elif pid is not None and action.startswith("kill"):
                    hit.pids, hit.done = (pid,), send_signal(pid, signal.SIGKILL)
                    if hit.actor is not None:
                        hit.end = None  # ends at its first ack after the restart (the gap holding it is excused)
                elif pid is not None and action == "stop actor":
                    hit.pids = tuple(family(pid))
                    hit.done = all(send_signal(p, signal.SIGSTOP) for p in hit.pids)
                    hit.end = now + stop_s
                    active = hit
                elif pid is not None and action == "drop link" and proxy is not None:
                    hit.pids = tuple(family(pid))
                    hit.done = proxy.drop(set(hit.pids), drop_s) > 0
                    hit.end = now + drop_s
                    active = hit
                hits.append(hit)
                print(
                    f"  t={hit.t - t0:>6.0f} s  {action} ({who}): {'done' if hit.done else 'not possible'}", flush=True
                )
            time.sleep(0.5)
    finally:
        fill.unlink(missing_ok=True)
        for h in hits:
            if h.action == "stop actor":
                for p in h.pids:
                    send_signal(p, signal.SIGCONT)
    proc.wait(timeout=300)
    watching.set()
    if hostile is not None:
        hostile.__exit__(None, None, None)
    if proxy is not None:
        proxy.__exit__(None, None, None)
    log_file.close()
    out = log_path.read_text()
    t_end = time.monotonic()
    for h in hits:  # an actor killed: excused until its first ack after the kill
        if h.end is None and h.actor is not None:
            h.end = next((t for t in acks.get(h.actor, []) if t > h.t), t_end)

    from robo_async.launch.restarts import read_events
    from robo_async.learner.metrics import read_metrics

    counted = count_rows(run_dir / "replay", root / "archive")
    produced, stored, lost = counted["produced"], counted["stored"], counted["lost"]
    duplicated, hostile_rows = counted["duplicated"], counted["hostile_rows"]
    events = read_events(run_dir)
    recover = learner_recoveries(events)
    restarts = sum(e["event"] in ("restarted",) for e in events)
    learner_restarts = sum(e["event"] == "failed" and e["who"] == "learner" for e in events)
    crashed = crashes(events, hits)
    rows = read_metrics(run_dir)
    missed = max((r.get("actors/missed_ticks", 0) for r in rows), default=0)
    slopes = rss_slopes(rss, judge_min)
    stalls = ack_stalls(acks, hits, t_end) if kind.hostile else {}
    print(
        f"{'produced':>10}{'stored':>10}{'lost':>6}{'dup':>6}{'restarts':>10}{'recover mean/max s':>20}"
        f"{'missed ticks':>14}{'RSS slope max MB/h':>20}{'crashes':>9}{'ack stall max s':>17}"
    )
    print(
        f"{produced:>10,}{stored:>10,}{lost:>6}{duplicated:>6}{restarts:>10}"
        f"{(np.mean(recover) if recover else 0):>11.1f}/{(max(recover) if recover else 0):<8.1f}{int(missed):>14}"
        f"{(max(slopes.values()) if slopes else 0):>20.1f}{len(crashed):>9}"
        f"{(max(stalls.values()) if stalls else 0):>17.1f}"
    )
    for c in crashed:
        print(f"  crash: {c['who']} (pid {c['pid']}): {c['why']}")
    result = {
        "minutes": minutes,
        "actors": actors,
        "produced": produced,
        "stored": stored,
        "lost": lost,
        "duplicated": duplicated,
        "in_store": counted["in_store"],
        "archived": counted["archived"],
        "restarts": restarts,
        "learner_restarts": learner_restarts,
        "learner_recoveries": len(recover),
        "recover_mean_s": round(float(np.mean(recover)), 2) if recover else None,
        "recover_max_s": round(float(max(recover)), 2) if recover else None,
        "crashes_from_messages": len(crashed),
        "crashes": crashed,
        "missed_ticks": int(missed),
        "ticks_learner_away": int(max((r.get("actors/ticks_learner_away", 0) for r in rows), default=0)),
        "rss_slope_mb_per_h": {k: round(v, 1) for k, v in slopes.items()},
        "rss_slope_mb_per_h_max": round(max(slopes.values()), 1) if slopes else None,
        "chaos": [
            {
                "t": round(h.t - t0, 1),
                "action": h.action,
                "actor": h.actor,
                "done": h.done,
                **({"victim_wait_s": round(w, 2)} if (w := victim_wait(acks, h)) is not None else {}),
            }
            for h in hits
        ],
        "run_dir": str(run_dir),
    }
    if kind.hostile:
        if acks:
            plot(root / "chaos.png", acks, hits, t0)
            print(f"acks per actor over the run: {root / 'chaos.png'}")
        result |= {
            "max_ack_stall_s": round(max(stalls.values()), 2) if stalls else None,
            "ack_stall_s_by_actor": {str(a): round(s, 2) for a, s in stalls.items()},
            "hostile": hostile.counts if hostile is not None else {},
            "hostile_rows_stored": hostile_rows,
            "malformed_counted": int(total(rows, "transport/malformed")),
            "id_refused": int(total(rows, "transport/id_mismatch")),
            "rows_refused": int(max((r.get("buffer/rows_refused", 0) for r in rows), default=0)),
            "link": proxy.counts if proxy is not None else {},
        }
    else:
        result |= {
            "link_cuts_possible": cuts_ok,
            "disk_fills": fills,
            "disk_pauses_logged": out.count("new data is NOT accepted"),
            "disk_min_free_gb_seen": round(min((r.get("buffer/disk_free_gb", 1e9) for r in rows), default=0), 1),
        }
    emit(result)
    return 0
