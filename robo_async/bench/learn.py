"""`robo-async bench learn`: online RL of per-step and chunk policies on `push` and `pick_lift`.

Each row is one `robo-async train` run (the command users run, in its own process, local
launcher) with a wall-clock budget, after the same 20 scripted demonstrations were recorded into a
store (`buffer.imports`, the `demos` table: RLPD mixing) and, for chunk policies, a BC flow
policy was trained on them (`robo-async bc`, the warm start `policy.path=`; its real-time
evaluation is the row's `bc_start_success`). Per row: wall-clock seconds and env steps until the
rolling success of 20 deterministic episodes reaches 80% (and 90%), the same as robot-minutes,
the final evaluation, updates/s. A learning-curve PNG of all rows goes to the bench directory.

    robo-async bench learn [rows=push-sac,push-qc,...] [budget_s=600] [pixel_budget_s=2700] [dir=...]

Each finished row is saved as `<dir>/<row>.json`; the report covers every row saved in `dir`, so a
matrix can be run a few rows at a time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from robo_async.bench import emit, register

STATE_KEYS = "[state,ee_to_cube,cube_to_target]"
SCALE = ["+policy.obs_scale.ee_to_cube=10", "+policy.obs_scale.cube_to_target=10"]
# state rows of the latency pair: the cube's position instead of features measured from the end effector,
# which async_forward cannot forward (it forwards the joints; ee_to_cube would be 6 ticks stale at 200 ms)
ABS_KEYS = "[state,cube_pos]"
ABS_SCALE = ["+policy.obs_scale.cube_pos=10"]
DEMOS = 20
MAX_STEP = 0.05  # rad per tick: the scripted demonstrator's speed (smooth demonstrations)


@dataclass(frozen=True)
class Row:
    """One row of the benchmark: a `robo-async train` run of `algo` on `task` from `obs`
    (state or pixels); `overrides(demos, bc_dir)` gives its command-line overrides.
    `latency_ms`: injected inference time (ms) with a wall-clock simulator and `async_forward`."""

    name: str
    task: str
    obs: str  # state | pixels
    algo: str
    latency_ms: float = 0.0
    realtime: bool = False  # wall-clock simulator and async_forward (the 0 ms twin of a latency row)
    extra: tuple[str, ...] = ()  # more train overrides (bench hil: teleop=virtual ...)
    classifier: bool = False  # the reward comes only from a success classifier (reward_classifier=)
    absolute: bool = False  # state rows: [state, cube_pos] (no features measured from the end effector)

    def overrides(self, demos: Path, bc_dir: Path | None) -> list[str]:
        o = [f"task={self.task}", f"buffer.imports=[{{path: {demos}, table: demos}}]"]
        if self.obs == "pixels":
            o += ["task.cameras=[front,wrist]", "task.image_size=64", "buffer.cache_mb=3000"]
        if self.algo == "sac":  # a peer env's observation keys and scales are its task's defaults
            o += ["policy=mlp", *(() if peer(self.task) else (f"policy.obs_keys={STATE_KEYS}", *SCALE)), "algo=sac"]
        else:
            keys = "[state]" if self.obs == "pixels" else ABS_KEYS if self.absolute else STATE_KEYS
            o += [
                "policy=flow",
                f"policy.obs_keys={keys}",
                *(ABS_SCALE if self.absolute else SCALE),
                f"algo={self.algo}",
            ]
            if self.obs == "pixels":
                o += ["policy.cameras=[front,wrist]"]
            if bc_dir is not None:
                o += [f"policy.path={bc_dir}"]
        if self.latency_ms or self.realtime:
            # latency only means ticks when the simulator keeps wall-clock time (an as-fast-as-possible
            # sim runs hundreds of ticks per 200 ms inference and holds through most of them)
            o += [
                "task.realtime=true",
                "actor.inference=async_forward",
                f"policy.inference_delay_ms={self.latency_ms:g}",
            ]
        return o + list(self.extra)


ROWS = {
    r.name: r
    for r in (
        Row("push-sac", "push", "state", "sac"),
        Row("push-qc", "push", "state", "qc"),
        Row("push-dsrl", "push", "state", "dsrl"),
        Row("push-filtered", "push", "state", "filtered"),
        Row("pick_lift-sac", "pick_lift", "state", "sac"),
        Row("pick_lift-qc", "pick_lift", "state", "qc"),
        Row("pick_lift-dsrl", "pick_lift", "state", "dsrl"),
        Row("pick_lift-filtered", "pick_lift", "state", "filtered"),
        Row("pick_lift-qc-realtime", "pick_lift", "state", "qc", 0.0, True),
        Row("pick_lift-qc-200ms", "pick_lift", "state", "qc", 200.0),
        # the latency pair with DSRL (faster than QC from state), two seeds per row (the median is compared),
        # from [state, cube_pos] (ABS_KEYS)
        Row("pick_lift-dsrl-realtime", "pick_lift", "state", "dsrl", 0.0, True, absolute=True),
        Row("pick_lift-dsrl-realtime-s1", "pick_lift", "state", "dsrl", 0.0, True, ("seed=1",), absolute=True),
        Row("pick_lift-dsrl-200ms", "pick_lift", "state", "dsrl", 200.0, absolute=True),
        Row("pick_lift-dsrl-200ms-s1", "pick_lift", "state", "dsrl", 200.0, False, ("seed=1",), absolute=True),
        # end to end (QC trains the encoder too): the update is the whole cost and the gated actor idles,
        # so the learner takes both cores' threads (2.8 updates/s with one in the 600 s row, 5.0 with two in a 240 s
        # probe)
        Row("pick_lift-pixels-qc", "pick_lift", "pixels", "qc", extra=("learner.threads=2",)),
        # frozen representation: DSRL steers the pixel BC policy, whose image encoder (trained by BC on the
        # demonstrations) stays frozen; the critics and the noise actor learn on its features
        Row("pick_lift-pixels-frozen", "pick_lift", "pixels", "dsrl"),
        Row("push-pixels-frozen", "push", "pixels", "dsrl"),
        # the same, with the reward only from a success classifier trained on the demonstrations plus 10
        # failure episodes (`robo-async reward train`); success is still judged by the simulator
        Row("pick_lift-pixels-classifier", "pick_lift", "pixels", "dsrl", classifier=True),
        # behaviour cloning alone: the same 20 demonstrations, 20 real-time episodes in async_forward at 0 ms
        Row("bc-pick_lift-state", "pick_lift", "state", "bc"),
        Row("bc-pick_lift-pixels", "pick_lift", "pixels", "bc"),
        Row("bc-tiny_vla", "reach,push,pick_lift", "pixels", "bc"),
    )
}


def _cli(args: list[str], timeout: float, log: Path) -> subprocess.CompletedProcess:
    with open(log, "w") as f:
        return subprocess.run(
            [sys.executable, "-m", "robo_async.cli", *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )


def peer(task: str) -> bool:
    """A peer's environment (gym_hil, Meta-World, any Gymnasium env): its own keys and expert."""
    from sim import POLICY_DEFAULTS

    return task in POLICY_DEFAULTS


def record_demos(task: str, obs: str, out: Path, log: Path) -> None:
    """20 scripted episodes, rate-limited (smooth, like a human's), with frames for pixel rows (a
    peer env's expert at its own pace)."""
    if not (out / "data.mdb").exists():
        cams = ["cameras=front,wrist", "image_size=64"] if obs == "pixels" else []
        pace = [] if peer(task) else [f"max_step={MAX_STEP}"]
        _cli(["buffer", "demos", f"out={out}", f"episodes={DEMOS}", f"task={task}", *pace, *cams], 900, log)


BC_EVAL = ["eval_episodes=20", "actor.inference=async_forward"]  # real time, no injected latency


def bc_start(
    task: str, obs: str, demos: Path, root: Path, log: Path, absolute: bool = False
) -> tuple[Path, float | None]:
    """The BC flow policy on the same demonstrations (from cameras and proprioception alone for
    pixel rows; `absolute`: from [state, cube_pos]), and its real-time success (20 deterministic
    episodes, async_forward, 0 ms)."""
    out = root / f"bc-{task}-{obs}{'-abs' if absolute else ''}"
    if not (out / "eval.json").exists():
        keys = "[state]" if obs == "pixels" else ABS_KEYS if absolute else STATE_KEYS
        # from pixels, batches of 64 windows (each step encodes every window's frames)
        extra = (
            ["task.cameras=[front,wrist]", "task.image_size=64", "policy.cameras=[front,wrist]", "policy.bc.batch=64"]
            if obs == "pixels"
            else []
        )
        _cli(
            [
                "bc",
                f"task={task}",
                "policy=flow",
                f"policy.obs_keys={keys}",
                *(ABS_SCALE if absolute else SCALE),
                *extra,
                f"policy.bc.from_store={demos}",
                f"run_dir={out}",
                *BC_EVAL,
            ],
            3600,
            log,
        )
    try:
        return out, float(json.loads((out / "eval.json").read_text())["success_rate"])
    except (OSError, KeyError, ValueError):
        return out, None


def success_classifier(task: str, demos: Path, root: Path) -> Path:
    """A success classifier (`robo-async reward train`, both cameras) on the bench's 20 demonstrations
    recorded on past their success, the expert holding the cube up (as an operator records positives:
    the demonstrations alone end at their first success frame, 20 positives in all), plus 10 failure
    episodes (the scripted near miss: the expert's grasp and lift beside the cube, rising empty),
    labelled by the simulator as an operator would label them."""
    out = root / f"classifier-{task}"
    if (out / "reward_classifier.json").exists():
        return out
    fails, labels, held = root / f"fails-{task}-pixels", root / f"labels-{task}", root / f"held-{task}-pixels"
    log = root / f"classifier-{task}.log"
    if not (held / "data.mdb").exists():  # the same episodes as `demos` (same seed and speed), held on
        _cli(
            [
                "buffer",
                "demos",
                f"out={held}",
                f"episodes={DEMOS}",
                f"task={task}",
                f"max_step={MAX_STEP}",
                "hold=true",
                "cameras=front,wrist",
                "image_size=64",
            ],
            900,
            log,
        )
    if not (fails / "data.mdb").exists():
        _cli(
            [
                "buffer",
                "demos",
                f"out={fails}",
                "episodes=10",
                f"task={task}",
                f"max_step={MAX_STEP}",
                "seed=7",
                "miss=true",
                "hold=true",
                "cameras=front,wrist",
                "image_size=64",
            ],
            900,
            log,
        )
    if not (labels / "data.mdb").exists():
        for src in (held, fails):
            _cli(["buffer", "import", str(labels), f"from={src}", "table=demos"], 900, log)
    res = _cli(["reward", "train", f"from={labels}", "cameras=[front,wrist]", f"out={out}"], 1800, log)
    if res.returncode != 0:
        raise RuntimeError(f"reward train failed: see {log}")
    return out


def curve(run_dir: Path) -> list[tuple[float, int, float, int]]:
    """(elapsed s, env steps, rolling deterministic success, episodes) per metrics line."""
    from robo_async.learner.metrics import read_metrics

    out = []
    for r in read_metrics(run_dir):
        if "charts/success_rate" in r:
            out.append(
                (
                    float(r["time/elapsed_s"]),
                    int(r["time/env_steps"]),
                    float(r["charts/success_rate"]),
                    int(r["time/episodes"]),
                )
            )
    return out


def first_reach(
    points: list[tuple[float, int, float, int]], level: float, min_episodes: int = 40
) -> tuple[float | None, int | None]:
    """When the rolling success of 20 deterministic episodes (every 2nd episode is one) first
    reaches `level`."""
    for t, steps, rate, eps in points:
        if eps >= min_episodes and rate >= level:
            return t, steps
    return None, None


def bc_row(row: Row, root: Path) -> dict[str, object]:
    """A behaviour-cloning row: `robo-async bc` on the bench's 20 demonstrations (pick_lift), or the
    tiny VLA on its own scripted demonstrations of each task; success per task."""
    t0 = time.monotonic()
    if row.name == "bc-tiny_vla":
        out = root / row.name
        if not (out / "eval.json").exists():
            _cli(["bc", "policy=tiny_vla", f"run_dir={out}", *BC_EVAL], 7200, root / f"{row.name}.log")
        try:
            per_task = dict(json.loads((out / "eval.json").read_text())["success"])
        except (OSError, KeyError, ValueError):
            per_task = {}
        success = min(per_task.values()) if per_task else None
    else:
        demos = root / f"demos-{row.task}-{row.obs}"
        record_demos(row.task, row.obs, demos, root / f"demos-{row.task}-{row.obs}.log")
        out, success = bc_start(row.task, row.obs, demos, root, root / f"{row.name}.log")
        per_task = {row.task: success}
    return {
        "row": row.name,
        "task": row.task,
        "obs": row.obs,
        "algo": "bc",
        "latency_ms": 0.0,
        "seconds_to_80": None,
        "env_steps_to_80": None,
        "robot_minutes_to_80": None,
        "seconds_to_90": None,
        "final_success": success,
        "bc_start_success": success,
        "per_task": per_task,
        "env_steps": 0,
        "updates": 0,
        "updates_per_s": 0.0,
        "wall_s": round(time.monotonic() - t0, 1),
        "train_jerk": None,
        "mean_completion_ticks": None,
        "run_dir": str(out),
        "curve": [],
    }


def run_row(row: Row, root: Path, budget_s: float, hz: float = 30.0) -> dict[str, object]:
    if row.algo == "bc":
        return bc_row(row, root)
    demos = root / f"demos-{row.task}-{row.obs}"
    record_demos(row.task, row.obs, demos, root / f"demos-{row.task}-{row.obs}.log")
    bc_dir, bc_success = (
        (None, None)
        if row.algo == "sac"
        else bc_start(row.task, row.obs, demos, root, root / f"bc-{row.task}-{row.obs}.log", absolute=row.absolute)
    )
    run_dir = root / row.name
    if run_dir.exists():  # a row is measured from scratch (train refuses a used run_dir)
        shutil.rmtree(run_dir)
    args = [
        "train",
        *row.overrides(demos, bc_dir),
        f"run_dir={run_dir}",
        f"budget.seconds={budget_s:g}",
        "stop_at_success=0.9",
        "eval_episodes=20",
    ]
    if row.classifier:  # it stops when the classifier judges 90% (no other judge on a real robot); the closing
        # evaluation is the simulator's
        args += [f"reward_classifier={success_classifier(row.task, demos, root)}"]
    t0 = time.monotonic()
    res = _cli(args, budget_s + 1800, root / f"{row.name}.log")
    out = summarize(row, root, bc_success, time.monotonic() - t0, res.returncode, hz)
    if row.classifier:  # its rolling success is the classifier's judgement; the final evaluation is the simulator's
        for k in ("seconds_to_80", "env_steps_to_80", "robot_minutes_to_80", "seconds_to_90"):
            out[f"classifier_judged_{k}"] = out[k]
            out[k] = None
    return out


def summarize(
    row: Row, root: Path, bc_success: float | None, wall: float, returncode: int, hz: float = 30.0
) -> dict[str, object]:
    """A row's figures from its run directory and log (also for a run whose bench was interrupted)."""
    run_dir = root / row.name
    text = (root / f"{row.name}.log").read_text()
    final = None
    for line in text.splitlines():
        if line.startswith("evaluation: success rate"):
            final = int(line.split()[3].rstrip("%")) / 100
    points = curve(run_dir) if (run_dir / "metrics.jsonl").exists() else []
    t80, s80 = first_reach(points, 0.8)
    t90, _ = first_reach(points, 0.9)
    from robo_async.learner.metrics import read_metrics

    metrics = read_metrics(run_dir) if points else []
    last = metrics[-1] if metrics else {}
    updates, elapsed = float(last.get("time/updates", 0)), float(last.get("time/elapsed_s", 0) or 1)
    # the learner's rate once it trains (after the warm-up, when updates wait for data by design)
    first = next((m for m in metrics if float(m.get("time/updates", 0)) > 0), None)
    span = float(last.get("time/elapsed_s", 0)) - float(first["time/elapsed_s"]) if first else 0.0
    training_rate = round((updates - float(first["time/updates"])) / span, 2) if first and span > 0 else None
    return {
        "row": row.name,
        "task": row.task,
        "obs": row.obs,
        "algo": row.algo,
        "latency_ms": row.latency_ms,
        "seconds_to_80": t80,
        "env_steps_to_80": s80,
        "robot_minutes_to_80": round(s80 / hz / 60, 2) if s80 is not None else None,
        "seconds_to_90": t90,
        "final_success": final,
        "bc_start_success": bc_success,
        "env_steps": int(last.get("time/env_steps", 0)),
        "updates": int(updates),
        "updates_per_s": round(updates / elapsed, 2),
        "updates_per_s_training": training_rate,
        "wall_s": round(wall, 1),
        "returncode": returncode,
        # commanded-action jerk of the last 20 training episodes per actor (mean abs d3a/dt3, rad/s^3)
        "train_jerk": round(float(last["actors/train_jerk"]), 1) if "actors/train_jerk" in last else None,
        "mean_completion_ticks": _completion(run_dir),
        "run_dir": str(run_dir),
        "curve": points,
    }


def _completion(run_dir: Path) -> float | None:
    """Mean episode length of the post-training evaluation (ticks), from the run's eval record."""
    for name in ("eval.json",):
        p = run_dir / name
        if p.exists():
            try:
                return float(json.loads(p.read_text()).get("mean_ticks"))
            except (ValueError, TypeError):
                return None
    return None


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        pts = r.get("curve") or []
        if pts:
            axes[0].plot([p[0] / 60 for p in pts], [p[2] for p in pts], label=r["row"])
            axes[1].plot([p[1] / 30 / 60 for p in pts], [p[2] for p in pts], label=r["row"])
    axes[0].set_xlabel("wall-clock minutes")
    axes[1].set_xlabel("robot minutes (env steps / 30 Hz)")
    for ax in axes:
        ax.set_ylabel("success (20 deterministic episodes)")
        ax.axhline(0.8, color="grey", lw=0.5, ls="--")
        ax.set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def selection(args: dict[str, str], key: str, choices: dict, default: str, prefix: str) -> tuple[list[str], Path]:
    """The runs named by `key=` (comma-separated, from `choices`) and the bench directory (`dir=`,
    or a new temporary one). Unknown names are a one-line error."""
    from robo_async.config import UserError

    names = [n for n in args.get(key, default).split(",") if n]
    unknown = [n for n in names if n not in choices]
    if unknown:
        raise UserError(f"unknown {key} {unknown}; {key}: {', '.join(choices)}")
    root = Path(args.get("dir") or tempfile.mkdtemp(prefix=prefix))
    root.mkdir(parents=True, exist_ok=True)
    return names, root


@register("learn")
def bench_learn(args: dict[str, str]) -> int:
    names, root = selection(args, "rows", ROWS, ",".join(ROWS), "bench-learn-")
    budget, pixel_budget = float(args.get("budget_s", 600)), float(args.get("pixel_budget_s", 2700))
    print(f"working in {root}", flush=True)
    for n in names:
        row = ROWS[n]
        print(f"row {n}: training for up to {pixel_budget if row.obs == 'pixels' else budget:.0f} s ...", flush=True)
        r = run_row(row, root, pixel_budget if row.obs == "pixels" else budget)
        (root / f"{n}.json").write_text(json.dumps(r))  # rows of earlier runs in the same dir= join the report
        print(
            f"  {n}: to 80% {r['seconds_to_80']} s / {r['env_steps_to_80']} steps, final {r['final_success']}, "
            f"bc start {r['bc_start_success']}, {r['updates_per_s']} updates/s",
            flush=True,
        )
    rows = [json.loads((root / f"{n}.json").read_text()) for n in ROWS if (root / f"{n}.json").exists()]
    plot(rows, root / "learning_curves.png")
    table = Table(title="bench learn (2 cores, 20 scripted demos per task)")
    cols = (
        "row",
        "seconds_to_80",
        "env_steps_to_80",
        "robot_minutes_to_80",
        "final_success",
        "bc_start_success",
        "updates_per_s",
        "env_steps",
        "train_jerk",
    )
    for c in cols:
        table.add_column(c, justify="left" if c == "row" else "right")
    for r in rows:
        table.add_row(*(str(r.get(c)) for c in cols))
    Console().print(table)
    print(f"learning curves: {root / 'learning_curves.png'}")

    def pick(task: str, obs: str, level: str) -> float | None:
        got = [
            r[level]
            for r in rows
            if r["task"] == task
            and r["obs"] == obs
            and not r["latency_ms"]
            and r[level] is not None
            and r["algo"] != "bc"
        ]
        return min(got) if got else None

    def row_value(name: str, key: str) -> float | None:
        got = [r.get(key) for r in rows if r["row"] == name]
        return got[0] if got else None

    def pair(algo: str) -> float | None:
        """200 ms over 0 ms: the median time to 80% of each row's seeds (None where a seed did not reach it)."""

        def median(prefix: str) -> float | None:
            got = [r["seconds_to_80"] for r in rows if r["row"] in (prefix, prefix + "-s1")]
            return None if not got or None in got else float(np.median(got))

        t200, t0 = median(f"pick_lift-{algo}-200ms"), median(f"pick_lift-{algo}-realtime")
        return round(t200 / t0, 2) if t200 and t0 else None

    ratios = {a: pair(a) for a in ("qc", "dsrl")}
    # the faster of QC and DSRL at 0 ms is the one the goal names
    t0s = {a: row_value(f"pick_lift-{a}-realtime", "seconds_to_80") for a in ratios}
    faster = min((a for a in t0s if t0s[a]), key=lambda a: t0s[a], default="qc")
    figures = {
        "rows": [{k: v for k, v in r.items() if k != "curve"} for r in rows],
        "pick_lift_state_seconds_to_90": pick("pick_lift", "state", "seconds_to_90"),
        "pick_lift_pixels_seconds_to_80": pick("pick_lift", "pixels", "seconds_to_80"),
        "push_pixels_seconds_to_80": pick("push", "pixels", "seconds_to_80"),
        "bc_pick_lift_state": row_value("bc-pick_lift-state", "final_success"),
        "bc_pick_lift_pixels": row_value("bc-pick_lift-pixels", "final_success"),
        "tiny_vla_min_task_success": row_value("bc-tiny_vla", "final_success"),
        # the learner's rate once it trains (after the warm-up; each row's updates_per_s counts from the start)
        "pixel_updates_per_s_e2e": row_value("pick_lift-pixels-qc", "updates_per_s_training"),
        "pixel_updates_per_s_frozen": row_value("pick_lift-pixels-frozen", "updates_per_s_training"),
        # true success (the simulator's judgement, 20 deterministic episodes) after training on the
        # classifier's reward alone
        "classifier_reward_success": row_value("pick_lift-pixels-classifier", "final_success"),
        "latency_200_over_0": ratios[faster],
        "latency_algo": faster,
        **_ingest_figures(root),
    }
    emit(figures)
    return 0


def _ingest_figures(root: Path) -> dict[str, float]:
    """Lossless durable ingest (two 128x128 cameras per transition) of the store users run: frames
    encoded by the actors (QOI, the default) and, for comparison, raw frames the store encodes."""
    from robo_async.bench.buffer import render_frames, store_ingest

    frames = render_frames(root / "frames.npz", 64)
    return {
        "ingest_lossless_per_s": round(store_ingest(frames, 5_000, root / "ingest-sent", actor_encoded=True), 1),
        "ingest_lossless_store_encodes_per_s": round(store_ingest(frames, 5_000, root / "ingest"), 1),
    }
