"""`robo-async bench buffer`: the replay store under load, with real processes.

Transitions carry two 128x128 RGB camera frames (MuJoCo renders of the reach scene, made unique
per transition) plus state. Figures:
- ingest: a producer process (the actor's Adder + Uplink) sends `transitions` over ZMQ to an
  ingest server process (the learner's store path); rate = transitions / time until all acked
  (durable), plus the store alone in-process (no network, no producer on the same cores);
- the same ingest with CURVE on both sockets (`curve=true`, the default): its rate and the ratio;
- commit interval p50/p99/max while ingesting;
- recovery: kill -9 the server with everything on disk, restart, time until open and until the
  first batch can be sampled;
- sample latency of a batch of 256 from the in-RAM cache, and of taking a prefetched batch;
- crash trials: `crash_trials` kill -9 of the server at random instants during ingest; counts of
  acked-then-lost and duplicated transitions in the final store.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from robo_async.bench import emit, register
from robo_async.bench.loadgen import make_row
from robo_async.buffer.codec import encode_frames
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.buffer.sampler import Sampler
from robo_async.commands.args import arg
from robo_async.transport.wire import TransitionBatch


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render_frames(path: Path, count: int) -> list[np.ndarray]:
    from sim.reach import ReachConfig, ReachTask

    task = ReachTask(ReachConfig(cameras=("front", "wrist")))
    task.build()
    rng = np.random.default_rng(0)
    frames: dict[str, list[np.ndarray]] = {"front": [], "wrist": []}
    for _ in range(count):
        task.reset(rng)
        for k, img in task.images().items():
            frames[k].append(img)
    arrays = {f"cam{i}": np.stack(frames[k]) for i, k in enumerate(("front", "wrist"))}
    np.savez(path, **arrays)
    return [arrays["cam0"], arrays["cam1"]]


class Proc:
    """A loadgen process whose stdout is read on a thread (so its pipe never fills)."""

    def __init__(self, args: list[str]) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-m", "robo_async.bench.loadgen", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.append(line.strip())

    def wait_line(self, prefix: str, timeout: float = 600) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for ln in self.lines:
                if ln.startswith(prefix):
                    return ln
            if self.p.poll() is not None and not self._t.is_alive():
                break
            time.sleep(0.01)
        raise RuntimeError(f"loadgen never printed '{prefix}'; output: {self.lines[-5:]}")

    def stats(self) -> dict:
        js = [ln for ln in self.lines if ln.startswith("{")]
        return json.loads(js[-1]) if js else {}

    def kill(self) -> None:
        self.p.send_signal(signal.SIGKILL)
        self.p.wait()

    def term(self) -> None:
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=120)


def _fields(line: str) -> dict[str, float]:
    return {k: float(v) for k, v in (w.split("=") for w in line.split()[1:] if "=" in w)}


def store_ingest(
    frames: list[np.ndarray], n: int, root: Path, codec: str = "qoi", actor_encoded: bool = False
) -> float:
    """The store alone: prebuilt batches inserted in-process until all are committed.
    `actor_encoded`: the frames come encoded (as actors' uplinks send them; encoded before the
    clock starts) and the store keeps the bytes, decoding each once for its RAM cache."""
    batches = []
    for seq in range(0, n, 32):
        rows = [make_row(s, 4, 2, 128, frames) for s in range(seq, seq + 32)]
        arrays = {f"obs/{k}": np.stack([r[0][k] for r in rows]) for k in rows[0][0]}
        arrays.update({f"next_obs/{k}": np.stack([r[1][k] for r in rows]) for k in rows[0][1]})
        arrays.update(
            action=np.zeros((32, 2), np.float32),
            reward=np.zeros(32, np.float32),
            terminated=np.zeros(32, bool),
            truncated=np.zeros(32, bool),
            policy_version=np.zeros(32, np.int64),
            success=np.zeros(32, bool),
        )
        if actor_encoded:
            arrays = encode_frames(arrays, codec)
        batches.append(TransitionBatch(0, seq, arrays))
    if root.exists():  # a store holding these seqs already would take none of them (duplicates)
        shutil.rmtree(root)
    store = PersistentReplayStore(root, StoreConfig(image_codec=codec)).open()
    t0 = time.perf_counter()
    for b in batches:
        store.insert(b)
    store.flush(600)
    rate = n / (time.perf_counter() - t0)
    store.close()
    return rate


def sample_latency(store_dir: Path, samples: int = 300) -> dict[str, float]:
    store = PersistentReplayStore(store_dir, StoreConfig()).open()
    cache = store.caches["online"]
    deadline = time.monotonic() + 300
    while cache.reservoir_filled < min(cache.reservoir_capacity, cache.older_count()) and time.monotonic() < deadline:
        time.sleep(0.05)  # let the pager fill the cache first
    rng = np.random.default_rng(0)
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        store.sample(256, rng)
        times.append((time.perf_counter() - t0) * 1000)
    sampler = Sampler(store, 256, {"online": 1.0}).start()
    gets = []
    for _ in range(samples // 3):
        time.sleep(0.02)  # stands in for a training step
        t0 = time.perf_counter()
        b = sampler.get(timeout=10)
        gets.append((time.perf_counter() - t0) * 1000)
        assert b is not None
    sampler.close()
    out = {
        "sample_p50_ms": float(np.median(times)),
        "sample_p99_ms": float(np.percentile(times, 99)),
        "prefetched_get_p50_ms": float(np.median(gets)),
        "prefetched_get_p99_ms": float(np.percentile(gets, 99)),
        "cached_transitions": cache.cached(),
    }
    store.close()
    return out


def crash_trials(root: Path, frames_file: Path, trials: int, rate: float) -> dict[str, int]:
    data, status = f"tcp://127.0.0.1:{_port()}", f"tcp://127.0.0.1:{_port()}"
    store = root / "crash"
    serve = ["serve", "--store", str(store), "--data", data, "--status", status]
    server = Proc(serve)
    server.wait_line("ready")
    until = int(rate * (trials * 0.8 + 3))
    producer = Proc(
        [
            "produce",
            "--until",
            str(until),
            "--images",
            "2",
            "--frames",
            str(frames_file),
            "--per-s",
            str(rate),
            "--data",
            data,
            "--status",
            status,
        ]
    )
    rng = np.random.default_rng(0)
    for _ in range(trials):
        time.sleep(rng.uniform(0.2, 1.0))  # mid-ingest: commits, pages and acks in flight
        server.kill()
        server = Proc(serve)
        server.wait_line("ready")
    done = _fields(producer.wait_line("done"))
    server.term()
    s = PersistentReplayStore(store).open(readonly=True)
    seqs = np.array([seq for _, _, seq, _ in s.records("online")])
    s.close()
    unique = set(seqs.tolist())
    max_acked = int(done["max_acked"])
    return {
        "crash_trials": trials,
        "crash_transitions": until,
        "crash_lost": sum(1 for q in range(until) if q not in unique),
        "crash_acked_lost": sum(1 for q in range(max_acked) if q not in unique),
        "crash_duplicates": int(len(seqs) - len(unique)),
        "crash_resends": int(done["resends"]),
    }


@dataclass(frozen=True, kw_only=True)
class BufferKeys:
    """The keys of `robo-async bench buffer`."""

    transitions: int = arg(100_000, help="transitions sent by the producer process")
    crash_trials: int = arg(20, help="kill -9 of the ingest server at random instants")
    crash_rate: float = arg(1000.0, help="transitions/s sent during the crash trials")
    commit_ms: float = arg(StoreConfig.commit_ms, help="the store's commit interval, ms (buffer.commit_ms)")
    curve: bool = arg(True, help="measure the same ingest with CURVE on both sockets")
    dir: Path | None = arg(None, help="working directory (none: a new temporary one)")


@register("buffer", BufferKeys)
def bench_buffer(args: BufferKeys) -> int:
    n = args.transitions
    trials = args.crash_trials
    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-buffer-"))
    root.mkdir(parents=True, exist_ok=True)
    frames_file = root / "frames.npz"
    frames = render_frames(frames_file, 64)
    print(f"working in {root}", flush=True)
    figures: dict[str, object] = {}

    print("store alone (in-process) ...", flush=True)
    figures["store_ingest_per_s"] = round(store_ingest(frames, min(n, 10_000), root / "alone"), 1)
    figures["store_ingest_per_s_actor_encoded"] = round(
        store_ingest(frames, min(n, 10_000), root / "alone-sent", actor_encoded=True), 1
    )
    figures["store_ingest_per_s_png"] = round(store_ingest(frames, min(n, 10_000), root / "alone-png", "png"), 1)
    figures["store_ingest_per_s_jpeg"] = round(store_ingest(frames, min(n, 10_000), root / "alone-jpeg", "jpeg"), 1)

    print(f"ingest of {n:,} transitions through producer -> ZMQ -> store ...", flush=True)
    data, status = f"tcp://127.0.0.1:{_port()}", f"tcp://127.0.0.1:{_port()}"
    serve = [
        "serve",
        "--store",
        str(root / "store"),
        "--data",
        data,
        "--status",
        status,
        "--commit-ms",
        str(args.commit_ms),
    ]
    server = Proc(serve)
    server.wait_line("ready")
    producer = Proc(
        [
            "produce",
            "--until",
            str(n),
            "--images",
            "2",
            "--frames",
            str(frames_file),
            "--data",
            data,
            "--status",
            status,
        ]
    )
    done = _fields(producer.wait_line("done", timeout=3600))
    stats = server.stats()
    figures.update(
        ingest_per_s=round(n / done["acked_s"], 1),
        commit_interval_ms=round(stats.get("commit_p50_ms", 0.0), 1),
        commit_interval_p99_ms=round(stats.get("commit_p99_ms", 0.0), 1),
        commit_interval_max_ms=round(stats.get("commit_max_ms", 0.0), 1),
        ingest_server_peak_rss_mb=round(stats.get("peak_rss_mb", 0.0)),
    )

    if args.curve:
        from robo_async.transport.curve import create_keys

        print("the same ingest with CURVE (authenticated, encrypted) ...", flush=True)
        keys = root / "keys"
        create_keys(keys, [0])
        c_data, c_status = f"tcp://127.0.0.1:{_port()}", f"tcp://127.0.0.1:{_port()}"
        c_server = Proc(
            [
                "serve",
                "--store",
                str(root / "store-curve"),
                "--data",
                c_data,
                "--status",
                c_status,
                "--keys",
                str(keys),
                "--commit-ms",
                str(args.commit_ms),
            ]
        )
        c_server.wait_line("ready")
        c_done = _fields(
            Proc(
                [
                    "produce",
                    "--until",
                    str(n),
                    "--images",
                    "2",
                    "--frames",
                    str(frames_file),
                    "--data",
                    c_data,
                    "--status",
                    c_status,
                    "--keys",
                    str(keys),
                ]
            ).wait_line("done", 3600)
        )
        c_server.term()
        figures["ingest_per_s_curve"] = round(n / c_done["acked_s"], 1)
        figures["curve_ingest_cost"] = round(figures["ingest_per_s"] / figures["ingest_per_s_curve"], 2)

    print("kill -9 with everything on disk, then restart ...", flush=True)
    server.kill()
    server = Proc(serve)
    ready = _fields(server.wait_line("ready"))
    figures.update(
        recovery_s=round(ready["recovery_s"], 4),
        first_sample_s=round(ready["first_sample_s"], 4),
        recovered_transitions=int(ready["count"]),
    )
    server.term()
    disk = sum(p.stat().st_size for p in (root / "store").iterdir())
    figures["disk_bytes_per_transition"] = round(disk / max(n, 1))

    print("sample latency from the cache ...", flush=True)
    figures.update({k: round(v, 3) if isinstance(v, float) else v for k, v in sample_latency(root / "store").items()})

    print(f"{trials} crash trials (kill -9 of the ingest server during ingest) ...", flush=True)
    figures.update(crash_trials(root, frames_file, trials, args.crash_rate))

    table = Table(title="bench buffer (two 128x128 RGB images + state per transition)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    goals = {
        "ingest_per_s": ">= 2000",
        "commit_interval_ms": "<= 100",
        "sample_p99_ms": "<= 10",
        "recovery_s": "<= 5",
        "crash_lost": "0",
        "crash_duplicates": "0",
    }
    table.add_column("goal")
    for k, v in figures.items():
        table.add_row(k, f"{v:,.3f}" if isinstance(v, float) else f"{v:,}", goals.get(k, ""))
    Console().print(table)
    emit(figures)
    return 0
