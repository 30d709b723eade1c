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

Options: episodes= chunk_len= ticks= latencies=0,100,200,300 modes=<comma list> sweep= bc_steps= out=
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table
from safetensors.torch import load_file, save_file

from policies.delayed import DelayedPolicy
from policies.flow import FlowChunkPolicy
from robo_async.actor.inference import ACTOR_MODES, AsyncChunkRunner, InferenceEngine, paced_episode
from robo_async.bench import register
from robo_async.learner.bc import record_expert, train_bc
from sim import ReachConfig, ReachExpert, ReachTask, SimRobot

MODES = ("sync", "async_naive", "async_forward", "async_forward_rtc", "async_forward_pipelined")
# bench mode -> (actor inference mode, inference workers, replan rule)
RUNS = {"sync": ("sync", 1, "due"), "async_naive": ("async_naive", 1, "due"),
        "async_forward": ("async_forward", 1, "due"), "async_forward_rtc": ("async_forward_rtc", 1, "due"),
        "async_forward_pipelined": ("async_forward", 2, "continuous")}
KEYS, DIMS = ("state", "target", "ee_to_target"), (6, 3, 3)
SCALE = {"ee_to_target": 10.0, "target": 5.0}


EXPERT_STEP = 0.03  # rad per tick: the demonstrator moves its joint targets at most this fast


def task_config(ticks: int, cameras: tuple[str, ...] = ()) -> ReachConfig:
    return ReachConfig(target_moves=2, move_gap=20, episode_ticks=ticks, success_radius=0.03, cameras=cameras,
                       image_size=96)


def trained_policy(horizon: int, steps: int, cache: Path) -> FlowChunkPolicy:
    spec = ReachTask().spec()
    policy = FlowChunkPolicy(KEYS, DIMS, spec.joint_low, spec.joint_high, horizon=horizon, steps=5,
                             hidden=(512, 512), obs_scale=SCALE, action_mode="delta", delta_range=0.6)
    key = hashlib.sha1(f"{policy.architecture}-{steps}-{EXPERT_STEP}-v3".encode()).hexdigest()[:10]
    path = cache / f"flow_reach_{key}.safetensors"
    if path.exists():
        policy.net.load_state_dict(load_file(str(path)))
        print(f"chunk policy from {path}", flush=True)
    else:
        print(f"training the chunk policy by behaviour cloning ({steps} steps) ...", flush=True)
        task = ReachTask(task_config(150))
        robot = SimRobot(task)
        robot.connect()
        demos = record_expert(robot, ReachExpert(task, EXPERT_STEP), 200, 150)
        robot.close()
        train_bc(policy, demos, steps, max_delay=12, log_every=max(steps // 5, 1))
        cache.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in policy.net.state_dict().items()}, str(path))
    policy.deterministic = True
    return policy


def run_episode(policy, mode: str, latency_ms: float, seed: int, ticks: int, cameras: tuple[str, ...] = ()) -> dict:
    task = ReachTask(task_config(ticks, cameras))
    robot = SimRobot(task)
    robot.connect()
    spec = robot.spec
    actor_mode, workers, replan = RUNS[mode]
    merge, forward = ACTOR_MODES[actor_mode]
    engine = InferenceEngine(DelayedPolicy(policy, latency_ms), spec.action_dim, policy.horizon, timeout_s=5,
                             workers=workers)
    runner = AsyncChunkRunner(engine, spec, merge, forward, replan=replan)
    stamps, actions, arrivals, reactions = [], [], [], []
    pending: list[tuple[float, int]] = []  # (time of the jump, first tick that can see it)
    seen, jumps = [0], [0]
    t0 = time.monotonic()

    def on_action(k: int, action: np.ndarray) -> None:
        if len(runner.versions) > seen[0]:
            arrivals.append(k)
            seen[0] = len(runner.versions)
        stamps.append(time.monotonic() - t0)
        actions.append(action.copy())
        # reaction: the first action computed from an observation taken after the jump
        if pending and runner.schedule.popped_obs_tick >= pending[0][1]:
            reactions.append((time.monotonic() - pending.pop()[0]) * 1000)

    def on_step(k: int) -> None:
        if task.moves_done > jumps[0]:  # the target just jumped
            jumps[0] = task.moves_done
            pending[:] = [(time.monotonic(), k + 1)]

    if mode != "sync":  # as the actor does before its first tick (the latency is known from the start)
        engine.warmup(robot.reset(seed=seed).as_dict())
    r = paced_episode(robot, runner, ticks, seed, on_action, on_step)
    infer_ms = [x * 1000 for x in engine.latency._samples]
    engine.close()
    robot.close()
    late = np.asarray(r["lateness_s"]) * 1000
    return {"success": r["success"], "time_s": r["time_s"],
            "reactions_ms": reactions, "lateness_ms": late, "missed": int(np.sum(late > spec.dt * 1000)),
            "actions": np.asarray(actions), "arrivals": arrivals, "stamps": stamps, "infer_ms": infer_ms}


def plot(trajs: dict[str, dict], path: Path, window: tuple[float, float] = (1.0, 2.6)) -> None:
    """Commanded joint targets against wall-clock time (a waiting robot shows as a flat stretch),
    one panel per mode; dotted lines where a chunk lands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(trajs), 1, figsize=(8, 2.2 * len(trajs)), sharex=True)
    for ax, (mode, r) in zip(np.atleast_1d(axes), trajs.items()):
        t, a = np.asarray(r["stamps"]), r["actions"]
        sel = (t >= window[0]) & (t <= window[1])
        for j in range(3):
            ax.plot(t[sel], a[sel, j], lw=1.0, marker=".", ms=3, label=f"joint {j}")
        for k in r["arrivals"]:
            if k < len(t) and window[0] <= t[k] <= window[1]:
                ax.axvline(t[k], color="grey", lw=0.6, ls=":")
        ax.set_title(f"{mode}: commanded joint targets, one dot per control tick (dotted: a chunk lands)",
                     fontsize=9)
        ax.set_ylabel("rad")
    np.atleast_1d(axes)[-1].set_xlabel("wall-clock time since the episode started (s)")
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chunk_sweep(lengths: list[int], main: int, main_policy: FlowChunkPolicy, episodes: int, ticks: int,
                bc_steps: int) -> list[dict]:
    """At 200 ms: how the chunk length trades sync's waiting against async's coverage of the latency."""
    rows = []
    for h in lengths:
        policy = main_policy if h == main else trained_policy(h, bc_steps, Path.home() / ".cache" / "robo_async" / "bench")
        res = {}
        for mode in ("sync", "async_forward", "async_forward_pipelined"):
            rs = [run_episode(policy, mode, 200, 5000 + e, ticks) for e in range(episodes)]
            react = [x for r in rs for x in r["reactions_ms"]]
            res[mode] = {"time_s": float(np.mean([r["time_s"] for r in rs])),
                         "success": float(np.mean([r["success"] for r in rs])),
                         "reaction_ms": float(np.median(react)) if react else None}
        for mode in ("async_forward", "async_forward_pipelined"):
            row = {"chunk_len": h, "mode": mode, "speedup_vs_sync": round(res["sync"]["time_s"] / res[mode]["time_s"], 3),
                   "reaction_ms": res[mode]["reaction_ms"], "success": res[mode]["success"],
                   "sync_reaction_ms": res["sync"]["reaction_ms"], "sync_success": res["sync"]["success"]}
            rows.append(row)
            print(f"  sweep 200 ms, chunk {h:>2}: {mode:<24} {row['speedup_vs_sync']:.2f}x faster than sync, "
                  f"reaction {row['reaction_ms']} ms (sync {row['sync_reaction_ms']}), success {row['success']:.0%}",
                  flush=True)
    return rows


def lerobot_act_rows(horizon: int, ticks: int) -> dict:
    """A real LeRobot ACT (LeRobot's default size, ResNet-18 on a 96x96 camera, random init, CPU)
    beside the loop: its own latency, no injected delay. Success is meaningless (untrained); the
    loop's timing is the point."""
    from policies.lerobot_chunk import build_lerobot_policy

    spec = ReachTask().spec()
    act = build_lerobot_policy("act", state_dim=6, action_low=spec.joint_low, action_high=spec.joint_high,
                               env_keys=("target", "ee_to_target"), env_dim=6, env_scale=10.0,
                               cameras=(("front", 96, 96),), chunk_size=horizon, use_vae=False)
    n_params = sum(p.numel() for p in act.policy.parameters())
    out: dict = {"lerobot_act_params_m": round(n_params / 1e6, 2)}
    for mode in ("sync", "async_forward"):
        rs = [run_episode(act, mode, 0, 7000 + e, ticks, cameras=("front",)) for e in range(2)]
        late = np.concatenate([r["lateness_ms"] for r in rs])
        inf = [x for r in rs for x in r["infer_ms"]]
        out[f"lerobot_act_{mode}"] = {"infer_p50_ms": round(float(np.percentile(inf, 50)), 2),
                                      "infer_p95_ms": round(float(np.percentile(inf, 95)), 2),
                                      "jitter_p99_ms": round(float(np.percentile(late, 99)), 3),
                                      "missed_ticks": int(sum(r["missed"] for r in rs))}
        print(f"  LeRobot ACT (random init, {n_params / 1e6:.1f} M params) {mode}: {out[f'lerobot_act_{mode}']}",
              flush=True)
    return out


@register("async-inference")
def bench_async_inference(args: dict[str, str]) -> int:
    torch.set_num_threads(1)
    episodes = int(args.get("episodes", 5))
    horizon = int(args.get("chunk_len", 8))
    ticks = int(args.get("ticks", 150))
    latencies = [int(x) for x in args.get("latencies", "0,100,200,300").split(",")]
    out = Path(args.get("out", "runs/bench-async-inference"))
    out.mkdir(parents=True, exist_ok=True)
    policy = trained_policy(horizon, int(args.get("bc_steps", 4000)), Path.home() / ".cache" / "robo_async" / "bench")
    rows: dict[str, dict] = {}
    trajs: dict[str, dict] = {}
    modes = [m for m in args.get("modes", ",".join(MODES)).split(",") if m]
    unknown = [m for m in modes if m not in RUNS]
    if unknown:
        raise ValueError(f"bench async-inference: unknown mode(s) {unknown}; modes: {list(RUNS)}")
    for lat in latencies:
        for mode in modes:
            rs = [run_episode(policy, mode, lat, 5000 + e, ticks) for e in range(episodes)]
            if lat == 200 and mode in MODES[:4]:
                trajs[mode] = rs[0]
            react = [x for r in rs for x in r["reactions_ms"]]
            late = np.concatenate([r["lateness_ms"] for r in rs])
            rows[f"{mode}@{lat}"] = {
                "mode": mode, "latency_ms": lat, "success": float(np.mean([r["success"] for r in rs])),
                "time_s": float(np.mean([r["time_s"] for r in rs])),
                "reaction_ms": float(np.median(react)) if react else None,
                "jitter_p99_ms": float(np.percentile(late, 99)), "missed_ticks": int(sum(r["missed"] for r in rs))}
            r = rows[f"{mode}@{lat}"]
            print(f"  {mode:<18} {lat:>4} ms: success {r['success']:.0%}  time {r['time_s']:.2f} s  "
                  f"reaction {r['reaction_ms']} ms  jitter p99 {r['jitter_p99_ms']:.2f} ms  missed {r['missed_ticks']}",
                  flush=True)
    if trajs:
        plot(trajs, out / "chunk_boundaries_200ms.png")
    table = Table(title=f"bench async-inference (chunk length {horizon}, {episodes} episodes each)")
    for col in ("mode", "latency ms", "success", "time s", "reaction ms", "jitter p99 ms", "missed ticks"):
        table.add_column(col, justify="right")
    for r in rows.values():
        table.add_row(r["mode"], str(r["latency_ms"]), f"{r['success']:.0%}", f"{r['time_s']:.2f}",
                      "-" if r["reaction_ms"] is None else f"{r['reaction_ms']:.0f}", f"{r['jitter_p99_ms']:.2f}",
                      str(r["missed_ticks"]))
    Console().print(table)
    figures: dict[str, object] = {"chunk_len": horizon, "episodes": episodes}
    if 200 in latencies and {"sync", "async_forward"} <= set(modes):
        s, f, base = rows["sync@200"], rows["async_forward@200"], rows.get("async_forward@0", rows["sync@200"])
        figures.update(
            speedup_vs_sync_200ms=round(s["time_s"] / f["time_s"], 3),
            reaction_ms_200ms=f["reaction_ms"],
            reaction_over_latency_200ms=round(f["reaction_ms"] / 200, 3) if f["reaction_ms"] else None,
            reaction_ratio_sync_200ms=round(s["reaction_ms"] / f["reaction_ms"], 3)
            if s["reaction_ms"] and f["reaction_ms"] else None,
            success_drop_pts_200ms=round(100 * (base["success"] - f["success"]), 1))
        if "async_forward_pipelined@200" in rows:
            pp = rows["async_forward_pipelined@200"]
            figures.update(
                speedup_vs_sync_200ms_pipelined=round(s["time_s"] / pp["time_s"], 3),
                reaction_ms_200ms_pipelined=pp["reaction_ms"],
                reaction_over_latency_200ms_pipelined=round(pp["reaction_ms"] / 200, 3) if pp["reaction_ms"] else None,
                success_drop_pts_200ms_pipelined=round(
                    100 * (rows.get("async_forward_pipelined@0", pp)["success"] - pp["success"]), 1))
    sweep = [int(x) for x in args.get("sweep", "4,6,8").split(",") if x]
    if sweep and 200 in latencies:
        figures["sweep_200ms"] = chunk_sweep(sweep, horizon, policy, episodes, ticks, int(args.get("bc_steps", 4000)))
    if args.get("lerobot_act", "true") == "true":
        figures.update(lerobot_act_rows(horizon, ticks))
    asyncs = [r for r in rows.values() if r["mode"] != "sync"]
    figures["jitter_p99_ms"] = round(max(r["jitter_p99_ms"] for r in asyncs), 3)
    figures["missed_ticks"] = int(sum(r["missed_ticks"] for r in asyncs))
    figures["plot"] = str(out / "chunk_boundaries_200ms.png")
    figures["table"] = list(rows.values())
    print(json.dumps(figures))
    return 0
