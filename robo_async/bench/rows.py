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
evaluation window is the prior's, not RL's) or RL, the final evaluation and updates/s.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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

    def seeded(self, seed: int) -> Row:
        """The same row for one seed (`seed=` of the train run): named `<name>-s<seed>`."""
        return dataclasses.replace(self, name=f"{self.name}-s{seed}", extra=(*self.extra, f"seed={seed}"))


# the "to X" figures of a row (None: never reached), in `seeds.merge`'s sense
REACH_KEYS = (
    "seconds_to_80",
    "env_steps_to_80",
    "robot_minutes_to_80",
    "seconds_to_90",
    "env_steps_to_90",
    "robot_minutes_to_90",
)
# its other figures over seeds (None: the run produced none)
VALUE_KEYS = (
    "final_success",
    "bc_start_success",
    "env_steps",
    "robot_minutes",
    "updates_per_s",
    "updates_per_s_training",
    "train_jerk",
    "mean_completion_ticks",
    "wall_s",
)


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


def control_hz(task: str, keys: Sequence[str] = ()) -> float:
    """The task's control rate (ticks per second, 1 / its robot spec's `dt`), as `robo-async train
    task=<task> <keys>` builds it (the robot built, not connected)."""
    from robo_async.config import compose_config
    from robo_async.launch.tasks import make_robot, task_args

    robot = make_robot(task_args(compose_config([f"task={task}", *keys]).task))
    try:
        return 1.0 / robot.spec.dt
    finally:
        robot.close()


def robot_minutes(env_steps: float | None, hz: float) -> float | None:
    """`env_steps` as minutes of a robot at `hz` (None stays None)."""
    return None if env_steps is None else round(env_steps / hz / 60, 2)


def measures(bc_success: float | None, level: float) -> str:
    """What a "seconds to `level`" figure measures: "bc" where the BC prior already succeeds at
    least that often (the first evaluation window is the prior's), else "rl"."""
    return "bc" if bc_success is not None and bc_success >= level else "rl"


def read_final(log: Path) -> float | None:
    """The closing evaluation's success rate from a train log (`evaluation: success rate N%`)."""
    final = None
    for line in log.read_text().splitlines() if log.exists() else ():
        if line.startswith("evaluation: success rate"):
            final = int(line.split()[3].rstrip("%")) / 100
    return final


def reach_figures(points: list[tuple[float, int, float, int]], bc_success: float | None, hz: float) -> dict:
    """The "to 80%" and "to 90%" figures of a run's curve: seconds, env steps, robot-minutes, and
    what each measures (`measures`)."""
    t80, s80 = first_reach(points, 0.8)
    t90, s90 = first_reach(points, 0.9)
    return {
        "seconds_to_80": t80,
        "env_steps_to_80": s80,
        "robot_minutes_to_80": robot_minutes(s80, hz),
        "seconds_to_90": t90,
        "env_steps_to_90": s90,
        "robot_minutes_to_90": robot_minutes(s90, hz),
        "measures_to_80": measures(bc_success, 0.8),
        "measures_to_90": measures(bc_success, 0.9),
        "hz": hz,
    }


def run_row(row: Row, root: Path, budget_s: float) -> dict[str, object]:
    """Train `row` (not a BC row) for up to `budget_s` seconds and read its figures back."""
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
    """Each run's rolling success against wall-clock minutes and against robot-minutes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        pts = r.get("curve") or []
        if pts:
            axes[0].plot([p[0] / 60 for p in pts], [p[2] for p in pts], label=r["row"])
            hz = float(r.get("hz") or 30.0)
            axes[1].plot([p[1] / hz / 60 for p in pts], [p[2] for p in pts], label=r["row"])
    axes[0].set_xlabel("wall-clock minutes")
    axes[1].set_xlabel("robot minutes (env steps / the task's control rate)")
    for ax in axes:
        ax.set_ylabel("success (20 deterministic episodes)")
        ax.axhline(0.8, color="grey", lw=0.5, ls="--")
        ax.set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
