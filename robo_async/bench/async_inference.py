"""`robo-async bench async-inference`: synchronous vs asynchronous chunk inference with injected
latency, on `reach` whose target jumps at random moments, in wall-clock real time at 30 Hz.

A flow-matching chunk policy is trained by delay-consistent behaviour cloning from the scripted
expert in the benchmark itself (cached under ~/.cache/robo_async/bench). For each injected
latency and mode (sync, async_naive, async_forward, async_forward_rtc; same chunk length; plus
async_forward_pipelined: two inferences in flight, staggered): success rate, mean completion time,
reaction latency (target jump -> first executed action that was computed from an observation taken
after the jump), control-tick jitter p99 and missed ticks. Saves a PNG of the commanded
trajectories around chunk boundaries for each mode at 200 ms.

Then, at 200 ms, a sweep of chunk lengths (`sweep=4,6,8`): sync must wait for every chunk, so
short chunks cost it most, while one-at-a-time async inference needs chunks at least as long as
the latency; and a real LeRobot ACT (random init) beside the loop to show the loop's timing under
real inference compute (`lerobot_act=false` skips it).

The actor users run drives every cell: SafeRobot, the control loop, Adder, Uplink (journal)
into a real ingest process that commits to a replay store and acks. Missed ticks: ticks started
more than half a period late.

Finally the RTC sweep (`rtc_variants=path,clean,remac`, chunk length `rtc_chunk_len=16`, latencies
`rtc_latencies=0,100,200,300,400` ms, i.e. delays up to 12 ticks): async_forward_rtc with policies
trained with each prefix conditioning: ours (the prefix on its flow path), training-time RTC (the
prefix given clean) and REMAC-style (clean, perturbed and partly hidden in training).

Options: episodes= chunk_len= ticks= latencies=0,100,200,300 modes=<comma list> sweep= bc_steps=
rtc_variants= rtc_latencies= rtc_chunk_len= lerobot_act=true out=

    robo-async bench async-inference [episodes=10] [chunk_len=8] [latencies=0,100,200,300] [sweep=4,6,8] [out=...]
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table
from safetensors.torch import load_file, save_file

from hal.safety import SafeRobot
from policies.delayed import DelayedPolicy
from policies.flow import FlowChunkPolicy
from robo_async.actor.actor import Actor, ActorConfig
from robo_async.actor.loop import LoopConfig, TickInfo
from robo_async.actor.uplink import UplinkConfig
from robo_async.bench import emit, register
from robo_async.bench.ingest import IngestProcess
from robo_async.launch.builders import TaskArgs
from robo_async.launch.experts import record_expert
from robo_async.learner.algorithms.bc.config import BCConfig
from robo_async.learner.algorithms.bc.offline import clone
from sim import ReachConfig, ReachTask, SimRobot

MODES = ("sync", "async_naive", "async_forward", "async_forward_rtc", "async_forward_pipelined")
# bench mode -> (actor inference mode, inference workers, replan rule)
RUNS = {
    "sync": ("sync", 1, "due"),
    "async_naive": ("async_naive", 1, "due"),
    "async_forward": ("async_forward", 1, "due"),
    "async_forward_rtc": ("async_forward_rtc", 1, "due"),
    "async_forward_pipelined": ("async_forward", 2, "continuous"),
}
KEYS, DIMS = ("state", "target", "ee_to_target"), (6, 3, 3)
SCALE = {"ee_to_target": 10.0, "target": 5.0}


EXPERT_STEP = 0.03  # rad per tick: the demonstrator moves its joint targets at most this fast


def task_config(ticks: int, cameras: tuple[str, ...] = ()) -> ReachConfig:
    return ReachConfig(
        target_moves=2, move_gap=20, episode_ticks=ticks, success_radius=0.03, cameras=cameras, image_size=96
    )


# prefix conditionings compared in the RTC sweep: name -> (prefix_mode, prefix_noise, prefix_hide)
VARIANTS = {"path": ("path", 0.0, 0.0), "clean": ("clean", 0.0, 0.0), "remac": ("clean", 0.1, 0.3)}


def trained_policy(horizon: int, steps: int, cache: Path, variant: str = "path") -> FlowChunkPolicy:
    """The benchmark's chunk policy, trained by BC (cached). `variant`: how it is conditioned on
    a committed prefix (VARIANTS: ours on the flow path, training-time RTC, REMAC-style)."""
    spec = ReachTask().spec()
    mode, noise, hide = VARIANTS[variant]
    policy = FlowChunkPolicy(
        KEYS,
        DIMS,
        spec.joint_low,
        spec.joint_high,
        horizon=horizon,
        steps=5,
        hidden=(512, 512),
        obs_scale=SCALE,
        action_mode="delta",
        delta_range=0.6,
        prefix_mode=mode,
    )
    demo_task = TaskArgs("reach", dataclasses.asdict(task_config(150)))
    # the cache key hashes everything that shaped the weights: sizes, steps, demos, and the code
    # of the demonstrator, the recorder, the BC loss and the policy
    import policies.flow as flow_code
    import robo_async.launch.experts as record_code
    import robo_async.learner.algorithms.bc.chunk as bc_code
    import robo_async.learner.algorithms.bc.learning as bc_algo_code
    import sim.reach as reach_code

    what = (
        [policy.architecture, steps, EXPERT_STEP, repr(demo_task)]
        + ([noise, hide] if noise or hide else [])
        + [inspect.getsource(m) for m in (bc_code, bc_algo_code, record_code, flow_code, reach_code)]
    )
    key = hashlib.sha1(json.dumps(what, default=str).encode()).hexdigest()[:12]
    path = cache / f"flow_reach_{key}.safetensors"
    if path.exists():
        policy.net.load_state_dict(load_file(str(path)))
        print(f"chunk policy from {path}", flush=True)
    else:
        print(f"training the chunk policy by behaviour cloning ({steps} steps) ...", flush=True)
        demos = record_expert(demo_task, 200, max_step=EXPERT_STEP)
        clone(
            policy,
            demos,
            steps,
            BCConfig(batch_size=256, lr=1e-3, max_delay=12, prefix_noise=noise, prefix_hide=hide),
            log_every=max(steps // 5, 1),
        )
        cache.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in policy.net.state_dict().items()}, str(path))
    policy.deterministic = True
    return policy


class _Recorder:
    """Observer of the actor's loop: per episode, wall time, commanded actions, chunk arrivals,
    and reactions (target jump -> first executed action computed from an observation after it)."""

    def __init__(self, task: ReachTask) -> None:
        self.task = task
        self.episodes: list[dict] = []
        self._ep = -1

    def __call__(self, t: TickInfo) -> None:
        if t.episode != self._ep:  # a new episode
            self._ep = t.episode
            self.cur = {
                "t0": t.chosen_at,
                "stamps": [],
                "actions": [],
                "arrivals": [],
                "reactions": [],
                "pending": [],
                "jumps": 0,
                "seen": t.new_chunks,
                "end": t.chosen_at,
                "ticks": 0,
            }
            self.episodes.append(self.cur)
        c = self.cur
        if t.new_chunks > c["seen"]:
            c["arrivals"].append(t.episode_tick)
            c["seen"] = t.new_chunks
        c["stamps"].append(t.chosen_at - c["t0"])
        c["actions"].append(np.asarray(t.action, np.float32).copy())
        if c["pending"] and t.obs_tick >= c["pending"][0][1]:
            c["reactions"].append((t.chosen_at - c["pending"].pop()[0]) * 1000)
        if self.task.moves_done > c["jumps"]:  # the target jumped during this tick
            c["jumps"] = self.task.moves_done
            c["pending"][:] = [(time.monotonic(), t.tick + 1)]
        c["end"] = time.monotonic()
        c["ticks"] = t.episode_tick + 1


def run_cell(
    policy,
    mode: str,
    latency_ms: float | None,
    episodes: int,
    ticks: int,
    ingest: tuple[str, str],
    actor_id: int,
    journal: Path,
    cameras: tuple[str, ...] = (),
) -> list[dict]:
    """`episodes` episodes of the training actor users run (SafeRobot, the control loop, Adder,
    Uplink into a real ingest process) in real time, with `latency_ms` injected per inference
    (None: the policy as it is, e.g. a `RemotePolicy` whose latency is the server's and the network's)."""
    task = ReachTask(task_config(ticks, cameras))
    actor_mode, workers, replan = RUNS[mode]
    rec = _Recorder(task)
    cfg = ActorConfig(
        actor_id,
        *ingest,
        LoopConfig(
            actor_id=actor_id,
            episode_ticks=ticks,
            realtime=True,
            seed=0,
            start_episode=5000,
            eval_every=1,
            max_episodes=episodes,
            inference=actor_mode,
            inference_workers=workers,
            replan=replan,
            inference_timeout_s=5,
            explore_until_weights=False,
            warmup_inference=mode != "sync",
        ),
        delivery=UplinkConfig(journal_dir=str(journal / str(actor_id))),
    )
    actor = Actor(
        SafeRobot(SimRobot(task)),
        policy if latency_ms is None else DelayedPolicy(policy, latency_ms),
        cfg,
        observer=rec,
    )
    result = actor.run(threading.Event())
    assert result is not None
    infer = actor.loop.stats() if actor.loop is not None else {}
    out = []
    for ep, c in zip(result.episodes, rec.episodes, strict=False):
        out.append(
            {
                "success": ep.success,
                "time_s": c["end"] - c["t0"],
                "reactions_ms": c["reactions"],
                "actions": np.asarray(c["actions"]),
                "arrivals": c["arrivals"],
                "stamps": c["stamps"],
            }
        )
    late = np.asarray(actor.loop.lateness.samples) * 1000 if actor.loop is not None else np.zeros(1)
    return out, {
        "lateness_ms": late,
        "missed": int(actor.loop.lateness.missed) if actor.loop else 0,
        "infer_p50_ms": infer.get("infer_p50_ms"),
        "infer_p95_ms": infer.get("infer_p95_ms"),
        "stats": infer,
    }


def plot(trajs: dict[str, dict], path: Path, window: tuple[float, float] = (1.0, 2.6)) -> None:
    """Commanded joint targets against wall-clock time (a waiting robot shows as a flat stretch),
    one panel per mode; dotted lines where a chunk lands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(trajs), 1, figsize=(8, 2.2 * len(trajs)), sharex=True)
    for ax, (mode, r) in zip(np.atleast_1d(axes), trajs.items(), strict=False):
        t, a = np.asarray(r["stamps"]), r["actions"]
        sel = (t >= window[0]) & (t <= window[1])
        for j in range(3):
            ax.plot(t[sel], a[sel, j], lw=1.0, marker=".", ms=3, label=f"joint {j}")
        for k in r["arrivals"]:
            if k < len(t) and window[0] <= t[k] <= window[1]:
                ax.axvline(t[k], color="grey", lw=0.6, ls=":")
        ax.set_title(f"{mode}: commanded joint targets, one dot per control tick (dotted: a chunk lands)", fontsize=9)
        ax.set_ylabel("rad")
    np.atleast_1d(axes)[-1].set_xlabel("wall-clock time since the episode started (s)")
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


class _Cells:
    """Runs cells against one ingest process, one actor id per cell (seqs never collide)."""

    def __init__(self, ingest: tuple[str, str], journal: Path, ticks: int, store_dir: Path) -> None:
        self.ingest, self.journal, self.ticks, self.next_id = ingest, journal, ticks, 0
        self.store_dir = store_dir

    def run(self, policy, mode: str, latency_ms: float, episodes: int, cameras: tuple[str, ...] = ()):
        self.next_id += 1
        return run_cell(
            policy, mode, latency_ms, episodes, self.ticks, self.ingest, self.next_id, self.journal, cameras
        )


def speedup_interval(
    sync_times: list[float], async_times: list[float], n: int = 2000, seed: int = 0
) -> tuple[float, float, float]:
    """Mean-time ratio sync/async with a 95% bootstrap interval over episodes."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(sync_times), np.asarray(async_times)
    boots = [rng.choice(a, len(a)).mean() / rng.choice(b, len(b)).mean() for _ in range(n)]
    return float(a.mean() / b.mean()), float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def chunk_sweep(
    lengths: list[int], main: int, main_policy: FlowChunkPolicy, episodes: int, cells: _Cells, bc_steps: int
) -> list[dict]:
    """At 200 ms: how the chunk length trades sync's waiting against async's coverage of the latency."""
    rows = []
    for h in lengths:
        policy = (
            main_policy if h == main else trained_policy(h, bc_steps, Path.home() / ".cache" / "robo_async" / "bench")
        )
        res = {}
        for mode in ("sync", "async_forward", "async_forward_pipelined"):
            rs, _ = cells.run(policy, mode, 200, episodes)
            react = [x for r in rs for x in r["reactions_ms"]]
            res[mode] = {
                "time_s": float(np.mean([r["time_s"] for r in rs])),
                "success": float(np.mean([r["success"] for r in rs])),
                "reaction_ms": float(np.median(react)) if react else None,
            }
        for mode in ("async_forward", "async_forward_pipelined"):
            row = {
                "chunk_len": h,
                "mode": mode,
                "speedup_vs_sync": round(res["sync"]["time_s"] / res[mode]["time_s"], 3),
                "reaction_ms": res[mode]["reaction_ms"],
                "success": res[mode]["success"],
                "sync_reaction_ms": res["sync"]["reaction_ms"],
                "sync_success": res["sync"]["success"],
            }
            rows.append(row)
            print(
                f"  sweep 200 ms, chunk {h:>2}: {mode:<24} {row['speedup_vs_sync']:.2f}x faster than sync, "
                f"reaction {row['reaction_ms']} ms (sync {row['sync_reaction_ms']}), success {row['success']:.0%}",
                flush=True,
            )
    return rows


def rtc_sweep(
    variants: list[str], latencies: list[int], horizon: int, episodes: int, cells: _Cells, bc_steps: int
) -> list[dict]:
    """async_forward_rtc with each prefix conditioning (trained that way) at delays up to 12
    ticks: success, completion time, and the jump where a chunk lands (mean |a_k - a_k-1| at
    arrival ticks over the mean elsewhere: 1 = seamless)."""
    rows = []
    for v in variants:
        policy = trained_policy(horizon, bc_steps, Path.home() / ".cache" / "robo_async" / "bench", v)
        for lat in latencies:
            rs, timing = cells.run(policy, "async_forward_rtc", lat, episodes)
            at, rest = [], []
            for r in rs:
                a = r["actions"]
                steps = np.abs(np.diff(a, axis=0)).sum(-1) if len(a) > 1 else np.zeros(0)
                arrivals = {k for k in r["arrivals"] if 0 < k < len(a)}
                at += [steps[k - 1] for k in arrivals]
                rest += [s for i, s in enumerate(steps) if i + 1 not in arrivals]
            row = {
                "variant": v,
                "latency_ms": lat,
                "latency_ticks": timing["stats"].get("latency_ticks"),
                "success": float(np.mean([r["success"] for r in rs])),
                "completion_s": round(float(np.mean([r["time_s"] for r in rs])), 3),
                "boundary_jump": round(float(np.mean(at) / max(np.mean(rest), 1e-9)), 3) if at and rest else None,
            }
            rows.append(row)
            print(
                f"  rtc sweep {v:<6} {lat:>4} ms ({row['latency_ticks']} ticks): success {row['success']:.0%}  "
                f"time {row['completion_s']:.2f} s  boundary jump {row['boundary_jump']}",
                flush=True,
            )
    return rows


def lerobot_act_rows(horizon: int, cells: _Cells) -> dict:
    """A real LeRobot ACT (LeRobot's default size, ResNet-18 on a 96x96 camera, random init, CPU)
    beside the loop: its own latency, no injected delay. Success is meaningless (untrained); the
    loop's timing is the point."""
    from policies.lerobot_chunk import build_lerobot_policy

    spec = ReachTask().spec()
    act = build_lerobot_policy(
        "act",
        state_dim=6,
        action_low=spec.joint_low,
        action_high=spec.joint_high,
        env_keys=("target", "ee_to_target"),
        env_dim=6,
        env_scale=10.0,
        cameras=(("front", 96, 96),),
        chunk_size=horizon,
        use_vae=False,
    )
    n_params = sum(p.numel() for p in act.policy.parameters())
    out: dict = {"lerobot_act_params_m": round(n_params / 1e6, 2)}
    # camera transitions have other columns: their own ingest process and store
    ingest = IngestProcess(str(cells.store_dir) + "-cameras")
    with ingest as addresses:
        cam_cells = _Cells(addresses, cells.journal, cells.ticks, cells.store_dir)
        cam_cells.next_id = cells.next_id + 1000  # actor ids (and journals) apart from the main cells'
        timings = {mode: cam_cells.run(act, mode, 0, 2, cameras=("front",))[1] for mode in ("sync", "async_forward")}
    for mode, t in timings.items():
        late = t["lateness_ms"]
        out[f"lerobot_act_{mode}"] = {
            "infer_p50_ms": t["infer_p50_ms"],
            "infer_p95_ms": t["infer_p95_ms"],
            "jitter_p99_ms": round(float(np.percentile(late, 99)), 3),
            "missed_ticks": t["missed"],
        }
        print(
            f"  LeRobot ACT (random init, {n_params / 1e6:.1f} M params) {mode}: {out[f'lerobot_act_{mode}']}",
            flush=True,
        )
    return out


@register("async-inference")
def bench_async_inference(args: dict[str, str]) -> int:
    torch.set_num_threads(1)
    episodes = int(args.get("episodes", 10))
    horizon = int(args.get("chunk_len", 8))
    ticks = int(args.get("ticks", 150))
    latencies = [int(x) for x in args.get("latencies", "0,100,200,300").split(",") if x]
    out = Path(args.get("out", "runs/bench-async-inference"))
    out.mkdir(parents=True, exist_ok=True)
    policy = trained_policy(horizon, int(args.get("bc_steps", 4000)), Path.home() / ".cache" / "robo_async" / "bench")
    modes = [m for m in args.get("modes", ",".join(MODES)).split(",") if m]
    unknown = [m for m in modes if m not in RUNS]
    if unknown:
        raise ValueError(f"bench async-inference: unknown mode(s) {unknown}; modes: {list(RUNS)}")
    rows: dict[str, dict] = {}
    trajs: dict[str, dict] = {}
    times: dict[str, list[float]] = {}
    ingest = IngestProcess(str(out / "ingest-store"))
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp, ingest as addresses:
        cells = _Cells(addresses, Path(tmp), ticks, out / "ingest-store")
        for lat in latencies:
            for mode in modes:
                rs, timing = cells.run(policy, mode, lat, episodes)
                if lat == 200 and mode in MODES[:4]:
                    trajs[mode] = rs[0]
                react = [x for r in rs for x in r["reactions_ms"]]
                late = timing["lateness_ms"]
                times[f"{mode}@{lat}"] = [r["time_s"] for r in rs]
                rows[f"{mode}@{lat}"] = {
                    "mode": mode,
                    "latency_ms": lat,
                    "loop": "actor",
                    "episodes": len(rs),
                    "success": float(np.mean([r["success"] for r in rs])),
                    "time_s": float(np.mean([r["time_s"] for r in rs])),
                    "reaction_ms": float(np.median(react)) if react else None,
                    "late_p50_ms": round(float(np.percentile(late, 50)), 3),
                    "jitter_p99_ms": round(float(np.percentile(late, 99)), 3),
                    "late_max_ms": round(float(np.max(late)), 3),
                    "missed_ticks": timing["missed"],
                }
                r = rows[f"{mode}@{lat}"]
                print(
                    f"  {mode:<24} {lat:>4} ms: success {r['success']:.0%}  time {r['time_s']:.2f} s  "
                    f"reaction {r['reaction_ms']} ms  late p50/p99/max {r['late_p50_ms']:.2f}/"
                    f"{r['jitter_p99_ms']:.2f}/{r['late_max_ms']:.2f} ms  missed {r['missed_ticks']}",
                    flush=True,
                )
        sweep = [int(x) for x in args.get("sweep", "4,6,8").split(",") if x]
        sweep_rows = (
            chunk_sweep(sweep, horizon, policy, episodes, cells, int(args.get("bc_steps", 4000)))
            if sweep and 200 in latencies
            else None
        )
        act_rows = lerobot_act_rows(horizon, cells) if args.get("lerobot_act", "true") == "true" else {}
        variants = [v for v in args.get("rtc_variants", ",".join(VARIANTS)).split(",") if v]
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            raise ValueError(f"bench async-inference: unknown rtc_variants {unknown}; known: {list(VARIANTS)}")
        rtc_rows = (
            rtc_sweep(
                variants,
                [int(x) for x in args.get("rtc_latencies", "0,100,200,300,400").split(",") if x],
                int(args.get("rtc_chunk_len", 16)),
                episodes,
                cells,
                int(args.get("bc_steps", 4000)),
            )
            if variants
            else []
        )
    if trajs:
        plot(trajs, out / "chunk_boundaries_200ms.png")
    table = Table(title=f"bench async-inference: the actor loop (chunk length {horizon}, {episodes} episodes each)")
    for col in ("mode", "latency ms", "success", "time s", "reaction ms", "late p50/p99/max ms", "missed ticks"):
        table.add_column(col, justify="right")
    for r in rows.values():
        table.add_row(
            r["mode"],
            str(r["latency_ms"]),
            f"{r['success']:.0%}",
            f"{r['time_s']:.2f}",
            "-" if r["reaction_ms"] is None else f"{r['reaction_ms']:.0f}",
            f"{r['late_p50_ms']:.2f}/{r['jitter_p99_ms']:.2f}/{r['late_max_ms']:.2f}",
            str(r["missed_ticks"]),
        )
    Console().print(table)
    figures: dict[str, object] = {
        "chunk_len": horizon,
        "episodes": episodes,
        "loop": "actor",
        "ingest_received": ingest.received,
    }
    if 200 in latencies and {"sync", "async_forward"} <= set(modes):
        s, f, base = rows["sync@200"], rows["async_forward@200"], rows.get("async_forward@0", rows["sync@200"])
        speed, lo, hi = speedup_interval(times["sync@200"], times["async_forward@200"])
        d = int(np.ceil(0.2 * 30 - 1e-9))  # the latency in ticks at 30 Hz
        ceiling = (horizon + d) / horizon
        figures.update(
            speedup_vs_sync_200ms=round(speed, 3),
            speedup_vs_sync_200ms_ci95=[round(lo, 3), round(hi, 3)],
            speedup_over_ceiling_200ms=round(speed / ceiling, 3),
            speedup_over_ceiling_200ms_ci95=[round(lo / ceiling, 3), round(hi / ceiling, 3)],
            reaction_ms_200ms=f["reaction_ms"],
            reaction_over_latency_200ms=round(f["reaction_ms"] / 200, 3) if f["reaction_ms"] else None,
            reaction_ratio_sync_200ms=round(s["reaction_ms"] / f["reaction_ms"], 3)
            if s["reaction_ms"] and f["reaction_ms"]
            else None,
            success_drop_pts_200ms=round(100 * (base["success"] - f["success"]), 1),
        )
        if "async_forward_pipelined@200" in rows:
            pp = rows["async_forward_pipelined@200"]
            figures.update(
                speedup_vs_sync_200ms_pipelined=round(s["time_s"] / pp["time_s"], 3),
                reaction_ms_200ms_pipelined=pp["reaction_ms"],
                reaction_over_latency_200ms_pipelined=round(pp["reaction_ms"] / 200, 3) if pp["reaction_ms"] else None,
                success_drop_pts_200ms_pipelined=round(
                    100 * (rows.get("async_forward_pipelined@0", pp)["success"] - pp["success"]), 1
                ),
            )
    if sweep_rows is not None:
        figures["sweep_200ms"] = sweep_rows
    figures.update(act_rows)
    if rtc_rows:
        figures["rtc_sweep"] = rtc_rows
    asyncs = [r for r in rows.values() if r["mode"] != "sync"]
    if asyncs:
        figures["late_p50_ms"] = round(max(r["late_p50_ms"] for r in asyncs), 3)
        figures["jitter_p99_ms"] = round(max(r["jitter_p99_ms"] for r in asyncs), 3)
        figures["late_max_ms"] = round(max(r["late_max_ms"] for r in asyncs), 3)
        figures["missed_ticks"] = int(sum(r["missed_ticks"] for r in asyncs))
    figures["plot"] = str(out / "chunk_boundaries_200ms.png")
    figures["table"] = list(rows.values())
    emit(figures)
    return 0
