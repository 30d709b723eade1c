"""A learning row's figures, read back from its run: the rolling-success curve from the run's
metrics (`curve`), when it first reaches a level (`first_reach`, `reach_figures`: seconds, env
steps and robot-minutes to 80% and 90%, and whether each measures the BC prior or RL), the task's
control rate (`control_hz`) that turns env steps into robot-minutes, the closing evaluation from
the train log (`read_final`), the evaluation's mean episode length (`completion_ticks`), and the
curves plotted (`plot`). `REACH_KEYS` and `VALUE_KEYS` name the figures `bench.seeds` merges.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

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
    "utd_reached",
    "train_jerk",
    "mean_completion_ticks",
    "wall_s",
)


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


def utd_reached(run_dir: Path) -> float | None:
    """Learner updates per env step over the whole run (its last metrics line): what a real-time
    paced run's learner managed under its cap."""
    from robo_async.learner.metrics import read_metrics

    last = None
    for r in read_metrics(run_dir):
        if "time/updates" in r and r.get("time/env_steps"):
            last = r
    return None if last is None else round(last["time/updates"] / last["time/env_steps"], 2)


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


def completion_ticks(run_dir: Path) -> float | None:
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
