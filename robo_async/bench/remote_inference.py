"""`robo-async bench remote-inference`: the async-inference scenario with the policy behind the
policy server (`robo-async serve`), reached through a delay/loss proxy process on real sockets.

1. Network sweep. The benchmark's chunk policy (BC from the scripted expert, cached; the one
   `bench async-inference` uses) runs in a server process with `infer_ms` (100) of injected
   inference time; the actor users run (SafeRobot, the control loop, Adder, Uplink into a real
   ingest process) asks it for chunks through the proxy at each round trip (0, 50, 150 ms) and
   loss (0, 2%), per mode (sync, async_forward, async_forward_rtc): success, mean completion
   time, reaction latency (target jump -> the first executed action computed from an
   observation after it), tick jitter p99 and missed ticks. The baseline is the same policy
   local with the same inference time (`local` rows). Goal: async_forward at 150 ms keeps >= 95%
   of its local success with 0 missed ticks and jitter p99 <= 2 ms.
2. Batching. 1, 2, 4, 8 actors (processes, each a `RemotePolicy` in a closed loop) against a
   server process running the policy with its real compute (no injected time), batched
   (`max_batch=16`) and one by one (`max_batch=1`): chunks/s and the gain at 8 actors (goal 3x).
3. VLA-class inference: LeRobot SmolVLA built from a generated tiny backbone, ms per chunk; and
   the tiny VLA's success per instruction (when those parts are available; else named as absent).

The policy server's process is in `bench.server_process`, part 2 in `bench.batching`.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from robo_async.bench import emit, register
from robo_async.bench.batching import batching, batching_figures
from robo_async.bench.server_process import CACHE, ServerProcess
from robo_async.commands.args import arg


def _summary(rs: list[dict], timing: dict) -> dict:
    react = [x for r in rs for x in r["reactions_ms"]]
    late = timing["lateness_ms"]
    return {
        "success": float(np.mean([r["success"] for r in rs])),
        "completion_s": round(float(np.mean([r["time_s"] for r in rs])), 3),
        "reaction_ms": round(float(np.median(react)), 1) if react else None,
        "jitter_p99_ms": round(float(np.percentile(late, 99)), 3),
        "missed_ticks": timing["missed"],
    }


@dataclass(frozen=True, kw_only=True)
class RemoteInferenceKeys:
    """The keys of `robo-async bench remote-inference`."""

    sweep: bool = arg(True, help="run the network sweep (part 1)")
    episodes: int = arg(4, help="episodes per cell of the sweep")
    rtts: tuple[float, ...] = arg((0.0, 50.0, 150.0), help="round trips through the proxy, ms")
    losses: tuple[float, ...] = arg((0.0, 0.02), help="packet loss shares through the proxy")
    modes: tuple[str, ...] = arg(("sync", "async_forward", "async_forward_rtc"), help="actor.inference modes swept")
    infer_ms: float = arg(100.0, help="inference time injected in the server, ms")
    chunk_len: int = arg(8, help="actions per chunk of the policy")
    ticks: int = arg(150, help="ticks per episode")
    bc_steps: int = arg(4000, help="behaviour-cloning steps of the bench's policy (cached)")
    batching: bool = arg(True, help="run the batching measurement (part 2)")
    batch_s: float = arg(4.0, help="seconds per batching measurement")
    batch_policies: tuple[str, ...] = arg(("large", "bench"), help="policies of the batching measurement")
    smolvla: bool = arg(True, help="time SmolVLA on the tiny generated backbone (part 3)")
    tiny_vla: str | None = arg(None, help="a `bc policy=tiny_vla` run dir, false to skip (none: trained here)")
    tiny_vla_episodes: int = arg(20, help="evaluation episodes of the tiny VLA trained here")
    out: Path = arg(Path("runs/bench-remote-inference"), help="where the figures and PNGs go")


def network_sweep(args: RemoteInferenceKeys, out: Path) -> tuple[list[dict], dict[str, dict]]:
    from robo_async.actor.remote import RemotePolicy
    from robo_async.bench.cells import _Cells, trained_policy
    from robo_async.bench.ingest import IngestProcess
    from robo_async.bench.netem import NetemProxy
    from sim import ReachTask

    episodes, horizon = args.episodes, args.chunk_len
    ticks, infer_ms = args.ticks, args.infer_ms
    bc_steps = args.bc_steps
    rtts, losses, modes = list(args.rtts), list(args.losses), list(args.modes)
    policy = trained_policy(horizon, bc_steps, CACHE)  # trains (once) and caches for the server process
    spec = ReachTask().spec()
    rows, local = [], {}
    ingest = IngestProcess(str(out / "ingest-store"))
    with tempfile.TemporaryDirectory(prefix="bench-remote-") as tmp, ingest as addresses:
        cells = _Cells(addresses, Path(tmp), ticks, out / "ingest-store")
        for mode in modes:  # the baseline: the same policy and inference time, on the actor
            rs, timing = cells.run(policy, mode, infer_ms, episodes)
            local[mode] = _summary(rs, timing)
            print(
                f"  local  {mode:<18} success {local[mode]['success']:.0%}  time {local[mode]['completion_s']:.2f} s  "
                f"reaction {local[mode]['reaction_ms']} ms  jitter p99 {local[mode]['jitter_p99_ms']:.2f} ms  "
                f"missed {local[mode]['missed_ticks']}",
                flush=True,
            )
        server = ServerProcess(horizon, bc_steps, infer_ms)
        with server as address:
            for rtt in rtts:
                for loss in losses:
                    with NetemProxy(address, rtt_ms=rtt, loss=loss, seed=int(rtt * 10 + loss * 1000)) as front:
                        for mode in modes:
                            cells.next_id += 1
                            remote = RemotePolicy(front, spec, actor_id=cells.next_id)
                            from robo_async.bench.cells import run_cell

                            rs, timing = run_cell(
                                remote, mode, None, episodes, ticks, cells.ingest, cells.next_id, cells.journal
                            )
                            remote.close()
                            row = {
                                "mode": mode,
                                "rtt_ms": rtt,
                                "loss": loss,
                                **_summary(rs, timing),
                                "rerequests": remote.rerequests,
                                "stale_replies": remote.stale_replies,
                                "latency_ticks": timing["stats"].get("latency_ticks"),
                                "rtt_p95_ms": timing["stats"].get("server_rtt_p95_ms"),
                            }
                            rows.append(row)
                            print(
                                f"  remote {mode:<18} rtt {rtt:>4.0f} ms loss {loss:.0%}: "
                                f"success {row['success']:.0%}  "
                                f"time {row['completion_s']:.2f} s  reaction {row['reaction_ms']} ms  jitter p99 "
                                f"{row['jitter_p99_ms']:.2f} ms  missed {row['missed_ticks']}  latency "
                                f"{row['latency_ticks']} ticks  re-requests {row['rerequests']}",
                                flush=True,
                            )
    return rows, local


@register("remote-inference", RemoteInferenceKeys)
def bench_remote_inference(args: RemoteInferenceKeys) -> int:
    torch.set_num_threads(1)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, object] = {
        "infer_ms": args.infer_ms,
        "chunk_len": args.chunk_len,
        "episodes": args.episodes,
    }
    rows: list[dict] = []
    local: dict[str, dict] = {}
    figures.update(smolvla_tiny_infer_ms=None, tiny_vla_success=None)
    if args.sweep:
        print("network sweep: the policy behind the server, through the delay/loss proxy", flush=True)
        rows, local = network_sweep(args, out)
    chunks_per_s: dict = {}
    sizes: dict = {}
    if args.batching:
        print("batching: closed-loop actors against one server (real compute, no injected time)", flush=True)
        chunks_per_s, sizes = batching(args.chunk_len, args.bc_steps, args.batch_s, args.batch_policies)
    table = Table(
        title=f"bench remote-inference ({figures['infer_ms']:.0f} ms inference on the server, chunk "
        f"length {figures['chunk_len']}, {figures['episodes']} episodes per cell)"
    )
    for col in (
        "mode",
        "rtt ms",
        "loss",
        "success",
        "time s",
        "reaction ms",
        "jitter p99 ms",
        "missed",
        "latency ticks",
    ):
        table.add_column(col, justify="right")
    for mode, r in local.items():
        table.add_row(
            mode,
            "local",
            "-",
            f"{r['success']:.0%}",
            f"{r['completion_s']:.2f}",
            str(r["reaction_ms"]),
            f"{r['jitter_p99_ms']:.2f}",
            str(r["missed_ticks"]),
            "-",
        )
    for r in rows:
        table.add_row(
            r["mode"],
            f"{r['rtt_ms']:.0f}",
            f"{r['loss']:.0%}",
            f"{r['success']:.0%}",
            f"{r['completion_s']:.2f}",
            str(r["reaction_ms"]),
            f"{r['jitter_p99_ms']:.2f}",
            str(r["missed_ticks"]),
            str(r["latency_ticks"]),
        )
    Console().print(table)
    bt = Table(title="policy server chunks/s by actors (real compute; clients and server share this machine's cores)")
    for col in ("policy", "server", "1", "2", "4", "8"):
        bt.add_column(col, justify="right")
    for kind, modes in chunks_per_s.items():
        for name, by in modes.items():
            bt.add_row(kind, name, *(f"{by[k]:.1f}" for k in ("1", "2", "4", "8")))
    Console().print(bt)
    figures["rows"] = rows
    figures["local"] = local
    if chunks_per_s:
        figures.update(batching_figures(chunks_per_s, sizes, args.chunk_len))
    af = [r for r in rows if r["mode"] == "async_forward" and r["rtt_ms"] == 150 and r["loss"] == 0]
    if af and "async_forward" in local:
        base = local["async_forward"]["success"]
        figures["async_forward_150ms_success_kept"] = round(af[0]["success"] / base, 3) if base else None
        figures["async_forward_150ms_missed_ticks"] = af[0]["missed_ticks"]
        figures["async_forward_150ms_jitter_p99_ms"] = af[0]["jitter_p99_ms"]
    print("VLA-class policies", flush=True)
    figures.update(vla_figures(args, out))
    (out / "remote_inference.json").write_text(json.dumps(figures, indent=1))
    emit(figures)
    return 0


def vla_figures(args: RemoteInferenceKeys, out: Path) -> dict[str, object]:
    """SmolVLA (LeRobot's classes on the tiny generated backbone, one 64x64 camera, chunk 8) ms
    per chunk on this CPU; the tiny VLA's success per instruction, from `tiny_vla=<bc run dir>`
    or trained here with `robo-async bc policy=tiny_vla` (the command users run; evaluated inline)."""
    figures: dict[str, object] = {}
    if args.smolvla:
        from policies.lerobot_build import build_lerobot_policy
        from policies.tiny_backbone import tiny_smolvlm_for
        from sim import INSTRUCTIONS, ReachTask

        spec = ReachTask().spec()
        policy = build_lerobot_policy(
            "smolvla",
            state_dim=spec.state_dim,
            action_low=spec.joint_low,
            action_high=spec.joint_high,
            cameras=(("front", 64, 64),),
            chunk_size=8,
            dt=spec.dt,
            task=INSTRUCTIONS["reach"],
            vlm_model_name=str(tiny_smolvlm_for(list(INSTRUCTIONS.values()))),
            resize_imgs_with_padding=(64, 64),
            num_steps=5,
            max_state_dim=8,
            max_action_dim=8,
        )
        obs = {"state": np.zeros(spec.state_dim, np.float32), "front": np.zeros((64, 64, 3), np.uint8)}
        for _ in range(3):
            policy.predict_chunk(obs)
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            policy.predict_chunk(obs, forwarded_state=obs["state"])
            times.append((time.perf_counter() - t0) * 1000)
        figures["smolvla_tiny_infer_ms"] = round(float(np.median(times)), 2)
        figures["smolvla_tiny_params"] = sum(p.numel() for p in policy.policy.parameters())
        print(
            f"  SmolVLA (tiny generated backbone, {figures['smolvla_tiny_params']:,} parameters): "
            f"{figures['smolvla_tiny_infer_ms']} ms per chunk",
            flush=True,
        )
    source = args.tiny_vla
    if source != "false":
        run = Path(source) if source else out / "tiny-vla"
        if not (run / "eval.json").exists():
            from robo_async.commands.bc import bc

            print(f"  training the tiny VLA: robo-async bc policy=tiny_vla run_dir={run} ...", flush=True)
            bc(
                [
                    "policy=tiny_vla",
                    f"run_dir={run}",
                    "actor.inference=inline",
                    f"eval_episodes={args.tiny_vla_episodes}",
                ]
            )
        result = json.loads((run / "eval.json").read_text())
        figures["tiny_vla_success"] = result["success"]
        figures["tiny_vla_eval"] = {"run": str(run), "mode": result["mode"], "episodes": result["episodes"]}
    return figures
