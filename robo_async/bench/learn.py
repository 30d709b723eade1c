"""`robo-async bench learn`: online RL of per-step and chunk policies on `push` and `pick_lift`.

Each row (`bench.rows`) is `robo-async train` (the command users run, in its own process, local
launcher) with a wall-clock budget, after the same 20 scripted demonstrations were recorded into a
store (`buffer.imports`, the `demos` table: RLPD mixing) and, for chunk policies, a BC flow policy
was trained on them (`robo-async bc`, the warm start `policy.path=`; its real-time evaluation is
the row's BC start, one prior per task shared by the row's seeds). Each row runs `seeds` seeds
(`seed=0..seeds-1`); per row, the median and [min, max] over seeds of: wall-clock seconds, env
steps and robot-minutes (env steps / the task's control rate) until the rolling success of 20
deterministic episodes reaches 80% (and 90%), marked BC where the BC start is already there (the
figure then measures the prior, not RL), the final evaluation, updates/s. A learning-curve PNG of
every seed's run goes to the bench directory. Behaviour-cloning rows (`bc-*`) are one run.

Each finished run is saved as `<dir>/<row>-s<seed>.json`; the report covers every run saved in
`dir`, so a matrix can be run a few rows at a time.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from robo_async.bench import emit, register, show
from robo_async.bench.row_figures import REACH_KEYS, VALUE_KEYS, plot
from robo_async.bench.rows import BC_EVAL, Row, _cli, bc_start, record_demos, run_row
from robo_async.bench.seeds import cell, merge, of
from robo_async.commands.args import arg

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
        # per robot-minute (issue 39): SAC and RLPD (two LayerNorm critics: on 2 cores compute caps the UTD) at 30 Hz,
        # acting as users' runs do (actor.inference=auto: sync_bounded, each tick's own observation) ...
        Row("pick_lift-sac-realtime", "pick_lift", "state", "sac", 0.0, True, inference="auto"),
        Row("pick_lift-rlpd-realtime", "pick_lift", "state", "rlpd", 0.0, True, ("algo.critics=2",), inference="auto"),
        # ... and a tick ahead from the forwarded state (async_forward, the default before sync_bounded)
        Row("pick_lift-sac-realtime-forward", "pick_lift", "state", "sac", 0.0, True),
        Row("pick_lift-rlpd-realtime-forward", "pick_lift", "state", "rlpd", 0.0, True, ("algo.critics=2",)),
        Row("pick_lift-qc-200ms", "pick_lift", "state", "qc", 200.0),
        # the latency pair with DSRL (faster than QC from state), from [state, cube_pos] (ABS_KEYS)
        Row("pick_lift-dsrl-realtime", "pick_lift", "state", "dsrl", 0.0, True, absolute=True),
        Row("pick_lift-dsrl-200ms", "pick_lift", "state", "dsrl", 200.0, absolute=True),
        # end to end (QC trains the encoder too): the update is the whole cost and the gated actor idles,
        # so the learner takes both cores' threads (2.8 updates/s with one in the 600 s row, 5.0 with two in a 240 s
        # probe)
        Row("pick_lift-pixels-qc", "pick_lift", "pixels", "qc", extra=("learner.threads=2",)),
        # frozen representation: DSRL steers the pixel BC policy, whose image encoder (trained by BC on the
        # demonstrations) stays frozen; the critics and the noise actor learn on its features
        Row("pick_lift-pixels-frozen", "pick_lift", "pixels", "dsrl"),
        Row("push-pixels-frozen", "push", "pixels", "dsrl"),
        # per robot-minute (issue 39): the same at the task's rate (30 Hz), the actor acting from forwarded state
        Row("pick_lift-pixels-frozen-realtime", "pick_lift", "pixels", "dsrl", 0.0, True),
        # the same, with the reward only from a success classifier trained on the demonstrations plus 10
        # failure episodes (`robo-async reward train`); success is still judged by the simulator
        Row("pick_lift-pixels-classifier", "pick_lift", "pixels", "dsrl", classifier=True),
        # behaviour cloning alone: the same 20 demonstrations, 20 real-time episodes in async_forward at 0 ms
        Row("bc-pick_lift-state", "pick_lift", "state", "bc"),
        Row("bc-pick_lift-pixels", "pick_lift", "pixels", "bc"),
        Row("bc-tiny_vla", "reach,push,pick_lift", "pixels", "bc"),
    )
}


@dataclass(frozen=True, kw_only=True)
class LearnKeys:
    """The keys of `robo-async bench learn`."""

    rows: tuple[str, ...] = arg((), help=f"rows to run (none: all of them): {', '.join(ROWS)}")
    seeds: int = arg(3, help="seeds per learning row (seed=0..seeds-1; 1 for a quick look)")
    budget_s: float = arg(600.0, help="wall-clock budget of each state row's train run, s")
    pixel_budget_s: float = arg(2700.0, help="wall-clock budget of each pixel row's train run, s")
    dir: Path | None = arg(
        None, help="bench directory; seeds saved there are not rerun and join the report (none: a new one)"
    )


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
        "realtime": True,
        **dict.fromkeys(REACH_KEYS),
        "final_success": success,
        "bc_start_success": success,
        "per_task": per_task,
        "env_steps": 0,
        "robot_minutes": 0.0,
        "updates": 0,
        "updates_per_s": 0.0,
        "wall_s": round(time.monotonic() - t0, 1),
        "train_jerk": None,
        "mean_completion_ticks": None,
        "run_dir": str(out),
        "curve": [],
    }


def selection(names: tuple[str, ...], key: str, choices: dict, prefix: str, dir: Path | None) -> tuple[list[str], Path]:
    """The runs named by `key=` (from `choices`; none given: all of them) and the bench directory
    (`dir`, or a new temporary one). Unknown names are a one-line error."""
    from robo_async.config import UserError

    chosen = list(names or choices)
    unknown = [n for n in chosen if n not in choices]
    if unknown:
        raise UserError(f"unknown {key} {unknown}; {key}: {', '.join(choices)}")
    root = Path(dir or tempfile.mkdtemp(prefix=prefix))
    root.mkdir(parents=True, exist_ok=True)
    return chosen, root


def saved_runs(root: Path, name: str) -> list[dict]:
    """The runs of row `name` saved in `root` (`<name>-s<seed>.json`), in seed order."""
    found = []
    for p in root.glob(f"{name}-s*.json"):
        m = re.fullmatch(rf"{re.escape(name)}-s(\d+)\.json", p.name)
        if m:
            found.append((int(m.group(1)), json.loads(p.read_text())))
    return [r for _, r in sorted(found, key=lambda x: x[0])]


def reach_cell(row: dict, key: str) -> str:
    """A "to X" figure's cell, marked `(BC)` where it measures the BC prior (its start already there)."""
    level = key.rsplit("_", 1)[-1]
    text = cell(of(row, key), "{:.3g}" if key.startswith("robot") else "{:.0f}")
    return f"{text} (BC)" if row.get(f"measures_to_{level}") == "bc" else text


@register("learn", LearnKeys)
def bench_learn(args: LearnKeys) -> int:
    names, root = selection(args.rows, "rows", ROWS, "bench-learn-", args.dir)
    budget, pixel_budget = args.budget_s, args.pixel_budget_s
    print(f"working in {root}", flush=True)
    for n in names:
        base = ROWS[n]
        for seed in range(1 if base.algo == "bc" else args.seeds):
            row = base.seeded(seed)
            if (root / f"{row.name}.json").exists():  # measured by an earlier, interrupted bench in this dir
                print(f"row {row.name}: saved in {root}, not run again", flush=True)
                continue
            limit = pixel_budget if base.obs == "pixels" else budget
            print(f"row {row.name}: training for up to {limit:.0f} s ...", flush=True)
            r = bc_row(base, root) if base.algo == "bc" else run_row(row, root, limit)
            r.update(row=n, seed=seed, run=row.name)
            (root / f"{row.name}.json").write_text(json.dumps(r))  # runs of earlier benches in dir= join the report
            print(
                f"  {row.name}: to 80% {r['seconds_to_80']} s / {r['env_steps_to_80']} steps / "
                f"{r['robot_minutes_to_80']} robot-min, final {r['final_success']}, "
                f"bc start {r['bc_start_success']}, {r['updates_per_s']} updates/s",
                flush=True,
            )
    runs = {n: saved_runs(root, n) for n in ROWS}
    every = [{**r, "row": r.get("run", r["row"])} for rs in runs.values() for r in rs]
    rows = [merge(rs, REACH_KEYS, VALUE_KEYS) for rs in runs.values() if rs]
    plot(every, root / "learning_curves.png")
    report(rows)
    print(f"learning curves: {root / 'learning_curves.png'}")
    emit({**figures(rows), **_ingest_figures(root)})
    return 0


def report(rows: list[dict]) -> None:
    """The table: per row, median [min, max] over its seeds."""
    cols = (
        "row",
        "seeds",
        "s to 80%",
        "robot-min to 80%",
        "env steps to 80%",
        "s to 90%",
        "final",
        "BC start",
        "updates/s",
        "UTD reached",
        "env steps",
        "train jerk",
    )
    cells = [
        (
            r["row"],
            str(r["seeds"]),
            reach_cell(r, "seconds_to_80"),
            reach_cell(r, "robot_minutes_to_80"),
            reach_cell(r, "env_steps_to_80"),
            reach_cell(r, "seconds_to_90"),
            cell(of(r, "final_success", reach=False), "{:.0%}", reach=False),
            cell(of(r, "bc_start_success", reach=False), "{:.0%}", reach=False),
            cell(of(r, "updates_per_s", reach=False), "{:.1f}", reach=False),
            cell(of(r, "utd_reached", reach=False), "{:.2g}", reach=False),
            cell(of(r, "env_steps", reach=False), "{:.0f}", reach=False),
            cell(of(r, "train_jerk", reach=False), "{:.0f}", reach=False),
        )
        for r in rows
    ]
    show(
        "bench learn (20 scripted demos per task): median [min, max] over seeds (never: a seed that did not get "
        "there); (BC): the BC start was already there, the figure measures the prior",
        cols,
        cells,
    )


def figures(rows: list[dict]) -> dict[str, object]:
    """The last line's figures: medians over seeds (None where the median seed never got there)."""

    def pick(task: str, obs: str, level: str) -> float | None:
        """The best RL row's median (not a BC row, not one whose BC start was already there, not
        one on a wall-clock simulator)."""
        got = [
            r[level]
            for r in rows
            if r["task"] == task
            and r["obs"] == obs
            and not r.get("realtime", r["latency_ms"])
            and r[level] is not None
            and r["algo"] != "bc"
            and r.get(f"measures_to_{level.rsplit('_', 1)[-1]}") != "bc"
        ]
        return min(got) if got else None

    def row_value(name: str, key: str) -> float | None:
        got = [r.get(key) for r in rows if r["row"] == name]
        return got[0] if got else None

    def pair(algo: str) -> float | None:
        """200 ms over 0 ms: each row's median seconds to 80% over its seeds (None where a median seed
        did not reach it)."""
        t200 = row_value(f"pick_lift-{algo}-200ms", "seconds_to_80")
        t0 = row_value(f"pick_lift-{algo}-realtime", "seconds_to_80")
        return round(t200 / t0, 2) if t200 and t0 else None

    ratios = {a: pair(a) for a in ("qc", "dsrl")}
    # the faster of QC and DSRL at 0 ms is the one the goal names
    t0s = {a: row_value(f"pick_lift-{a}-realtime", "seconds_to_80") for a in ratios}
    faster = min((a for a in t0s if t0s[a]), key=lambda a: t0s[a], default="qc")
    return {
        "rows": [{k: v for k, v in r.items() if k != "curve"} for r in rows],
        "pick_lift_state_seconds_to_90": pick("pick_lift", "state", "seconds_to_90"),
        "pick_lift_state_robot_minutes_to_90": pick("pick_lift", "state", "robot_minutes_to_90"),
        "pick_lift_pixels_seconds_to_80": pick("pick_lift", "pixels", "seconds_to_80"),
        "pick_lift_pixels_robot_minutes_to_80": pick("pick_lift", "pixels", "robot_minutes_to_80"),
        "push_pixels_seconds_to_80": pick("push", "pixels", "seconds_to_80"),
        "push_pixels_robot_minutes_to_80": pick("push", "pixels", "robot_minutes_to_80"),
        **{
            f"{r['row']}_{k}": r.get(k)
            for r in rows
            if r["algo"] != "bc"
            for k in ("seconds_to_80", "robot_minutes_to_80", "measures_to_80")
        },
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
        "median_over_seeds": "a seed that never reached X counts as +inf; null: the median seed never did",
    }


def _ingest_figures(root: Path) -> dict[str, float]:
    """Lossless durable ingest (two 128x128 cameras per transition) of the store users run: frames
    encoded by the actors (QOI, the default) and, for comparison, raw frames the store encodes."""
    from robo_async.bench.buffer import render_frames, store_ingest

    frames = render_frames(root / "frames.npz", 64)
    return {
        "ingest_lossless_per_s": round(store_ingest(frames, 5_000, root / "ingest-sent", actor_encoded=True), 1),
        "ingest_lossless_store_encodes_per_s": round(store_ingest(frames, 5_000, root / "ingest"), 1),
    }
