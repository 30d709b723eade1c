"""One learning row of `bench learn`, `bench envs` and `bench hil`: a `robo-async train` run (the
command users run, in its own process, local launcher) with a wall-clock budget, after 20 scripted
demonstrations were recorded into a store (`buffer.imports`, the `demos` table: RLPD mixing) and,
for chunk policies, a BC flow policy was trained on them (`robo-async bc`, the warm start
`policy.path=`; its real-time evaluation is the row's `bc_start_success`), and its figures read
back from the run directory.

A row's figures: wall-clock seconds and env steps until the rolling success of 20 deterministic
episodes first reaches 80% (and 90%), the same as robot-minutes (env steps / the task's control
rate, `control_hz`, / 60: what a real robot at that rate would take), whether that figure measures
the BC prior (`measures_to_80`: "bc" where the BC start is already at or above 80%, so the first
evaluation window is the prior's, not RL's) or RL, the final evaluation and updates/s. How each
is read back from the run (the curve, the levels, the control rate, the plot): `bench.row_figures`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from robo_async.bench.row_figures import (
    REACH_KEYS,
    completion_ticks,
    control_hz,
    curve,
    reach_figures,
    read_final,
    robot_minutes,
)

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
    demo_keys: tuple[str, ...] = ()  # task keys the demonstrations are recorded with (e.g. the cube at one start)
    inference: str = "async_forward"  # actor.inference of the real-time and latency rows (auto: as users' runs)

    def overrides(self, demos: Path, bc_dir: Path | None) -> list[str]:
        o = [f"task={self.task}", f"buffer.imports=[{{path: {demos}, table: demos}}]"]
        if self.obs == "pixels":
            o += ["task.cameras=[front,wrist]", "task.image_size=64", "buffer.cache_mb=3000"]
        if self.algo in ONE_STEP:  # a peer env's observation keys and scales are its task's defaults
            keys = () if peer(self.task) else (f"policy.obs_keys={STATE_KEYS}", *SCALE)
            o += ["policy=mlp", *keys, f"algo={self.algo}"]
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
                f"actor.inference={self.inference}",
                f"policy.inference_delay_ms={self.latency_ms:g}",
            ]
        return o + list(self.extra)

    def seeded(self, seed: int) -> Row:
        """The same row for one seed (`seed=` of the train run): named `<name>-s<seed>`."""
        return dataclasses.replace(self, name=f"{self.name}-s{seed}", extra=(*self.extra, f"seed={seed}"))


ONE_STEP = ("sac", "rlpd")  # algorithms (and presets) of the one-step policy=mlp, learned from scratch


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


def record_demos(task: str, obs: str, out: Path, log: Path, keys: tuple[str, ...] = ()) -> None:
    """20 scripted episodes, rate-limited (smooth, like a human's), with frames for pixel rows (a
    peer env's expert at its own pace); `keys`: task keys of the recording (e.g. one cube start)."""
    if not (out / "data.mdb").exists():
        cams = ["cameras=front,wrist", "image_size=64"] if obs == "pixels" else []
        pace = [] if peer(task) else [f"max_step={MAX_STEP}"]
        args = ["buffer", "demos", f"out={out}", f"episodes={DEMOS}", f"task={task}", *keys, *pace, *cams]
        _cli(args, 900, log)


def demos_dir(row: Row, root: Path) -> Path:
    """Where a row's demonstrations go: one directory per task, observation and recording keys."""
    import hashlib

    tag = "-" + hashlib.sha1(" ".join(row.demo_keys).encode()).hexdigest()[:6] if row.demo_keys else ""
    return root / f"demos-{row.task}-{row.obs}{tag}"


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


def run_row(row: Row, root: Path, budget_s: float) -> dict[str, object]:
    """Train `row` (not a BC row) for up to `budget_s` seconds and read its figures back."""
    demos = demos_dir(row, root)
    record_demos(row.task, row.obs, demos, demos.with_suffix(".log"), row.demo_keys)
    bc_dir, bc_success = (
        (None, None)
        if row.algo in ONE_STEP
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
    out = summarize(row, root, bc_success, time.monotonic() - t0, res.returncode, control_hz(row.task))
    if row.classifier:  # its rolling success is the classifier's judgement; the final evaluation is the simulator's
        for k in REACH_KEYS:
            out[f"classifier_judged_{k}"] = out[k]
            out[k] = None
    return out


def summarize(
    row: Row, root: Path, bc_success: float | None, wall: float, returncode: int, hz: float = 30.0
) -> dict[str, object]:
    """A row's figures from its run directory and log (also for a run whose bench was interrupted)."""
    run_dir = root / row.name
    final = read_final(root / f"{row.name}.log")
    points = curve(run_dir) if (run_dir / "metrics.jsonl").exists() else []
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
        "realtime": bool(row.realtime or row.latency_ms),
        **reach_figures(points, bc_success, hz),
        "final_success": final,
        "bc_start_success": bc_success,
        "env_steps": int(last.get("time/env_steps", 0)),
        "robot_minutes": robot_minutes(int(last.get("time/env_steps", 0)), hz),
        "updates": int(updates),
        "updates_per_s": round(updates / elapsed, 2),
        "updates_per_s_training": training_rate,
        "utd_reached": round(updates / last["time/env_steps"], 2) if last.get("time/env_steps") else None,
        "wall_s": round(wall, 1),
        "returncode": returncode,
        # commanded-action jerk of the last 20 training episodes per actor (mean abs d3a/dt3, rad/s^3)
        "train_jerk": round(float(last["actors/train_jerk"]), 1) if "actors/train_jerk" in last else None,
        "mean_completion_ticks": completion_ticks(run_dir),
        "run_dir": str(run_dir),
        "curve": points,
    }
