"""One cell of `bench async-inference` (and `bench remote-inference`): the benchmark's chunk policy
(flow matching, trained by delay-consistent BC from the scripted expert on `reach` whose target
jumps, cached under ~/.cache/robo_async/bench), driven through the actor users run (SafeRobot, the
control loop, Adder, Uplink with its journal into a real ingest process) in one inference mode with
injected latency, in wall-clock real time at 30 Hz; per episode: success, time, reactions (target
jump -> first executed action computed from an observation after it), commanded actions, chunk
arrivals and tick lateness."""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import threading
import time
from pathlib import Path

import numpy as np
from safetensors.torch import load_file, save_file

from hal.safety import SafeRobot
from policies.delayed import DelayedPolicy
from policies.flow import FlowChunkPolicy
from robo_async.actor.actor import Actor, ActorConfig
from robo_async.actor.loop_config import LoopConfig, TickInfo
from robo_async.actor.uplink_config import UplinkConfig
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
