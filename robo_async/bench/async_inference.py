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
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from policies.flow import FlowChunkPolicy
from robo_async.bench import emit, register
from robo_async.bench.cells import MODES, RUNS, VARIANTS, _Cells, trained_policy
from robo_async.bench.ingest import IngestProcess
from robo_async.commands.args import arg
from sim import ReachTask


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
    from policies.lerobot_build import build_lerobot_policy

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


@dataclasses.dataclass(frozen=True, kw_only=True)
class AsyncInferenceKeys:
    """The keys of `robo-async bench async-inference`."""

    episodes: int = arg(10, help="episodes per cell (mode x latency)")
    chunk_len: int = arg(8, help="actions per chunk of the policy")
    ticks: int = arg(150, help="ticks per episode")
    latencies: tuple[int, ...] = arg((0, 100, 200, 300), help="injected inference latencies, ms")
    modes: tuple[str, ...] = arg(MODES, help="inference modes compared")
    bc_steps: int = arg(4000, help="behaviour-cloning steps of the bench's policy (cached)")
    sweep: tuple[int, ...] = arg((4, 6, 8), help="chunk lengths of the sweep at 200 ms (empty: none)")
    lerobot_act: bool = arg(True, help="time a real LeRobot ACT (random init) in the loop")
    rtc_variants: tuple[str, ...] = arg(tuple(VARIANTS), help="prefix conditionings of the RTC sweep (empty: none)")
    rtc_latencies: tuple[int, ...] = arg((0, 100, 200, 300, 400), help="latencies of the RTC sweep, ms")
    rtc_chunk_len: int = arg(16, help="chunk length of the RTC sweep")
    out: Path = arg(Path("runs/bench-async-inference"), help="where the figures and PNGs go")


@register("async-inference", AsyncInferenceKeys)
def bench_async_inference(args: AsyncInferenceKeys) -> int:
    torch.set_num_threads(1)
    episodes = args.episodes
    horizon = args.chunk_len
    ticks = args.ticks
    latencies = list(args.latencies)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    policy = trained_policy(horizon, args.bc_steps, Path.home() / ".cache" / "robo_async" / "bench")
    modes = list(args.modes)
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
        sweep = list(args.sweep)
        sweep_rows = (
            chunk_sweep(sweep, horizon, policy, episodes, cells, args.bc_steps) if sweep and 200 in latencies else None
        )
        act_rows = lerobot_act_rows(horizon, cells) if args.lerobot_act else {}
        variants = list(args.rtc_variants)
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            raise ValueError(f"bench async-inference: unknown rtc_variants {unknown}; known: {list(VARIANTS)}")
        rtc_rows = (
            rtc_sweep(
                variants,
                list(args.rtc_latencies),
                args.rtc_chunk_len,
                episodes,
                cells,
                args.bc_steps,
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
