"""`robo-async bench hil`: human-in-the-loop training against the same run without an operator.

Per task (`push` from our sims, gym_hil's PandaPickCube) and per seed, two `robo-async train` runs
(the command users run, local launcher, as fast as the learner allows) of per-step SAC from state
with the same 20 scripted demonstrations (RLPD mixing), as in `bench learn`'s push-sac row; the HIL
arm adds the virtual operator (`teleop=virtual`: it takes over with the scripted expert when the
policy strays or stalls, hands back after `hold_ticks`; never in evaluation episodes) and
HG-DAgger on its corrections (`algo.dagger_weight`). Reported per run: seconds, env steps and
robot-minutes (env steps / the task's control rate) until 20 deterministic episodes reach 80%
success, operator ticks, the intervention rate (share of all ticks, evaluation episodes included)
in the first and last 10% of the run's env steps, and the correction -> policy time (an
intervention's commit to the first policy version trained after it acting on the robot). Per task
and arm: the median and [min, max] over seeds (`bench.seeds`: a seed that never reached 80% counts
as +inf, so the median is null when the median seed never did) and the arms' ratio (speedup; where
only the operator's arm got there, the no-operator median counted at its budget gives a lower
bound). Then a success classifier is trained with `robo-async reward train` on rendered
`pick_lift` frames and its held-out precision and recall are reported.
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from robo_async.bench import emit, register, show
from robo_async.bench.rows import Row, _cli, run_row
from robo_async.bench.seeds import Spread, cell, spread
from robo_async.commands.args import arg
from robo_async.config import UserError

HIL = ("teleop=virtual",)  # the operator's arm; and HG-DAgger's weight (`dagger_weight=`, 1.0 unless named)
TASKS = ("push", "gym_hil")
# demonstrations from one start (the cube at one place) for tasks that put it anywhere (bench hil demos=one_start)
ONE_START = {
    "gym_hil": ("task.kwargs=[[random_block_position,false],[reset_delay_seconds,0.0]]",),
    "push": ("task.cube_xy=[0.185,0.0]",),
    "pick_lift": ("task.cube_xy=[0.185,0.0]",),
}
ARMS = ("hil", "no_hil")


def run_of(
    task: str,
    arm: str,
    seed: int,
    algo: str = "sac",
    realtime: bool = False,
    demos: str = "spread",
    dagger_weight: float = 1.0,
    start_range: float | None = None,
) -> Row:
    """One run of the bench: SAC (or `algo`, e.g. the rlpd preset) from state on `task`, with
    (`hil`) or without the operator; `realtime`: the actor at the task's rate (named `-rt`);
    `demos=one_start`: the demonstrations all start from one cube place (named `-onestart`);
    `dagger_weight`: HG-DAgger's imitation of the corrections (named `-dw<w>` unless 1.0);
    `start_range`: both arms' training episodes start from this fraction of the cube's range at first,
    widening with success (`actor.start_range`, named `-sr<f>`)."""
    one = demos == "one_start"
    name = f"{task}-{arm}{'' if algo == 'sac' else '-' + algo}{'-rt' if realtime else ''}{'-onestart' if one else ''}"
    if arm == "hil" and dagger_weight != 1.0:
        name += f"-dw{dagger_weight:g}"
    if start_range is not None:
        name += f"-sr{start_range:g}"
    # RLPD with two critics, as bench learn's and bench envs' RLPD rows: ten cost this CPU most of its UTD
    critics = ("algo.critics=2",) if algo == "rlpd" else ()
    hil = (*HIL, f"algo.dagger_weight={float(dagger_weight)}") if arm == "hil" else ()
    curriculum = (f"actor.start_range={float(start_range)}",) if start_range is not None else ()
    extra = (*hil, *critics, *curriculum, f"seed={seed}")
    return Row(
        f"{name}-s{seed}",
        task,
        "state",
        algo,
        realtime=realtime,
        extra=extra,
        demo_keys=ONE_START[task] if one else (),
        inference="auto",  # real time: as users' runs act (sync_bounded for the one-step policy)
    )


def intervention_rates(run_dir: Path, share: float = 0.1) -> tuple[float | None, float | None]:
    """Operator ticks / all ticks in the first and the last `share` of the run's env steps."""
    from robo_async.learner.metrics import read_metrics

    pts = [
        (int(r["time/env_steps"]), int(r["hil/operator_ticks"]))
        for r in read_metrics(run_dir)
        if "hil/operator_ticks" in r
    ]
    if not pts or pts[-1][0] == 0:
        return None, None
    total = pts[-1][0]

    def at(steps: float) -> tuple[int, int]:
        return min(pts, key=lambda p: abs(p[0] - steps))

    s1, o1 = at(share * total)
    s9, o9 = at((1 - share) * total)
    first = o1 / s1 if s1 else None
    last = (pts[-1][1] - o9) / (total - s9) if total > s9 else None
    return first, last


def classifier(root: Path, updates: int = 600) -> dict[str, object]:
    """The learned reward on pick_lift's front camera: 20 expert episodes held on after the lift
    (frames before it are failures, after it successes), a quarter of the episodes held out."""
    from policies.reward import SuccessClassifier
    from robo_async.launch.builders import TaskArgs
    from robo_async.launch.experts import record_demos

    store, out = root / "reward-frames", root / "reward-classifier"
    if not (store / "data.mdb").exists():
        record_demos(
            TaskArgs("pick_lift", {"cameras": ("front",), "image_size": 64, "episode_ticks": 90}),
            store,
            episodes=20,
            max_step=0.05,
            until_terminated=False,
            seed=11,
        )
    res = _cli(
        ["reward", "train", f"from={store}", "cameras=[front]", f"updates={updates}", f"out={out}"],
        3600,
        root / "reward-classifier.log",
    )
    if res.returncode != 0:
        return {"precision": None, "recall": None}
    m = SuccessClassifier.load(out).meta
    return {
        "precision": round(m.precision, 4),
        "recall": round(m.recall, 4),
        "brier": round(m.brier, 4),
        "threshold": round(m.threshold, 4),
        "heldout_frames": m.heldout_frames,
        "heldout_positives": m.heldout_positives,
    }


@dataclass(frozen=True, kw_only=True)
class HilKeys:
    """The keys of `robo-async bench hil`."""

    tasks: tuple[Literal["push", "gym_hil", "pick_lift"], ...] = arg(TASKS, help="tasks compared")
    seeds: int = arg(3, help="seeds per task and arm (seed=0..seeds-1; 1 for a quick look)")
    arms: tuple[Literal["hil", "no_hil"], ...] = arg(ARMS, help="with the virtual operator (hil), without (no_hil)")
    budget_s: float = arg(600.0, help="wall-clock budget of each train run, s")
    algo: Literal["sac", "rlpd"] = arg("sac", help="the learner: sac, or the rlpd preset (algo=rlpd)")
    demos: Literal["spread", "one_start"] = arg(
        "spread", help="the 20 demonstrations' cube starts: spread as the task's, or all from one place"
    )
    realtime: bool = arg(
        False, help="the actor at the task's rate (task.realtime=true): robot time as a robot spends it"
    )
    dagger_weight: float = arg(
        1.0, help="the operator's arm: HG-DAgger's weight on imitating the corrections (0: they are only replay)"
    )
    start_range: float | None = arg(
        None, help="both arms start training episodes from this fraction of the cube's range, widening with success"
    )
    classifier: bool = arg(True, help="train and score the success classifier on pick_lift frames")
    dir: Path | None = arg(None, help="bench directory; runs saved there are not rerun (none: a new one)")

    def __post_init__(self) -> None:
        if not math.isfinite(self.dagger_weight) or self.dagger_weight < 0:  # refused before any run starts
            raise UserError(f"bench hil: dagger_weight must be a finite number >= 0, not {self.dagger_weight}")
        if self.start_range is not None and not 0 < self.start_range <= 1:  # (NaN fails it too)
            raise UserError(f"bench hil: start_range must be in (0, 1], not {self.start_range}")


def bounded(runs: list[dict], key: str, stand_in: float | None = None) -> float | None:
    """The median of `key` over seeds with a seed that never reached 80% counted as `stand_in` (its
    run's own env steps where None): a lower bound of the median where seeds did not get there."""
    vals = [r[key] if r.get(key) is not None else (stand_in or float(r.get("env_steps", 0))) for r in runs]
    return spread(vals).median


def summarize_task(runs: dict[str, list[dict]], budget: float) -> dict[str, object]:
    """Per task: each arm's median, [min, max] and per-seed seconds, env steps and robot-minutes to
    80% (`bench.seeds`), and the speedups (no operator over operator)."""
    hil, base = runs.get("hil", []), runs.get("no_hil", [])
    out: dict[str, object] = {}
    got: dict[str, Spread] = {}
    for arm, rs in (("hil", hil), ("no_hil", base)):
        for k in ("seconds_to_80", "env_steps_to_80", "robot_minutes_to_80"):
            s = got[f"{arm}_{k}"] = spread([r.get(k) for r in rs])
            out[f"{arm}_{k}"] = None if s.median is None else round(s.median, 2 if k.startswith("robot") else 1)
            out[f"{arm}_{k}_range"] = [s.low, s.high]
            out[f"{arm}_{k}_seeds"] = list(s.values)
    rates = [r["intervention_rate_last"] for r in hil if r.get("intervention_rate_last") is not None]

    def speedup(k: str, stand_in: float | None) -> tuple[float | None, bool]:
        """no_hil over hil: None where the operator's arm's median seed did not get there; where only
        the other arm's did not, its median with such seeds at `stand_in` (a lower bound)."""
        t_hil, t_base = got[f"hil_{k}"].median, got[f"no_hil_{k}"].median
        if not hil or not base or t_hil is None or not t_hil:
            return None, False
        if t_base is None:
            bound = bounded(base, k, stand_in)
            return (round(bound / t_hil, 2) if bound else None), True
        return round(t_base / t_hil, 2), False

    sp, lower = speedup("seconds_to_80", budget)
    # env steps (and robot-minutes, the same task's rate on both arms): blind to how much CPU each run had
    sp_steps, steps_lower = speedup("env_steps_to_80", None)
    return {
        **out,
        "speedup_env_steps": sp_steps,
        "robot_minutes_speedup": sp_steps,
        # the no-operator arm's median seed did not get there: its seeds' own env steps stand in (a lower bound)
        "speedup_env_steps_is_lower_bound": bool(steps_lower and sp_steps is not None),
        # the operator's arm did not reach 80% in most seeds: no figure; the other arm did not: a lower bound
        "speedup": sp,
        "speedup_is_lower_bound": bool(lower and sp is not None),
        "intervention_rate_last": round(statistics.median(rates), 4) if rates else None,
        "intervention_rate_last_seeds": [r.get("intervention_rate_last") for r in hil],
        "seeds": {arm: [r.get("seconds_to_80") for r in rs] for arm, rs in runs.items()},
    }


@register("hil", HilKeys)
def bench_hil(args: HilKeys) -> int:
    tasks, arms = list(args.tasks), list(args.arms)
    seeds = args.seeds
    root = Path(args.dir or tempfile.mkdtemp(prefix="bench-hil-"))
    root.mkdir(parents=True, exist_ok=True)
    budget = args.budget_s
    print(f"working in {root}", flush=True)
    from robo_async.learner.metrics import read_metrics

    keys = (args.algo, args.realtime, args.demos, args.dagger_weight, args.start_range)

    def named(task: str, arm: str, seed: int) -> str:
        return run_of(task, arm, seed, *keys).name

    for task in tasks:
        for seed in range(seeds):
            for arm in arms:
                row = run_of(task, arm, seed, *keys)
                if (root / f"{row.name}.json").exists():  # measured by an earlier, interrupted bench in this dir
                    continue
                print(f"{row.name}: training for up to {budget:.0f} s ...", flush=True)
                r = run_row(row, root, budget)
                run_dir = Path(str(r["run_dir"]))
                last = read_metrics(run_dir)[-1] if (run_dir / "metrics.jsonl").exists() else {}
                first_rate, last_rate = intervention_rates(run_dir)
                r.update(
                    {
                        "arm": arm,
                        "seed": seed,
                        "operator_ticks": int(last.get("hil/operator_ticks", 0)),
                        "takeovers": int(last.get("hil/takeovers", 0)),
                        "intervention_rate_first": first_rate,
                        "intervention_rate_last": last_rate,
                        "correction_to_policy_s": last.get("hil/correction_to_policy_s"),
                    }
                )
                (root / f"{row.name}.json").write_text(json.dumps(r))
                print(
                    f"  {row.name}: to 80% {r['seconds_to_80']} s / {r['env_steps_to_80']} steps, final "
                    f"{r['final_success']}, operator ticks {r['operator_ticks']}",
                    flush=True,
                )
    runs = {
        task: {
            arm: [
                json.loads((root / f"{named(task, arm, s)}.json").read_text())
                for s in range(seeds)
                if (root / f"{named(task, arm, s)}.json").exists()
            ]
            for arm in arms
        }
        for task in tasks
    }
    clf: dict[str, object] = {"precision": None, "recall": None}
    if args.classifier:
        print("reward classifier (pick_lift, front camera) ...", flush=True)
        clf = classifier(root)
    from robo_async.bench.row_figures import plot

    every = [{**r, "row": r["row"]} for t in runs.values() for rs in t.values() for r in rs]
    plot(every, root / "learning_curves.png")
    cols = (
        "seconds_to_80",
        "env_steps_to_80",
        "robot_minutes_to_80",
        "final_success",
        "operator_ticks",
        "takeovers",
        "intervention_rate_first",
        "intervention_rate_last",
        "correction_to_policy_s",
        "updates_per_s",
    )
    show(
        f"bench hil (SAC from state, 20 demos, {budget:.0f} s per run, {seeds} seeds): each run",
        ("run", *cols),
        [(r["row"], *(f"{r[c]:.3g}" if isinstance(r.get(c), float) else str(r.get(c)) for c in cols)) for r in every],
    )
    per_task = {task: summarize_task(rs, budget) for task, rs in runs.items()}
    cells = []
    for task, f in per_task.items():
        sp = f["speedup"]

        def spread_of(key: str, f: dict = f) -> Spread:
            return spread(f[f"{key}_seeds"])

        cells.append(
            (
                task,
                "/".join(str(len(runs[task].get(a, []))) for a in ("no_hil", "hil")),
                cell(spread_of("no_hil_seconds_to_80")),
                cell(spread_of("hil_seconds_to_80")),
                "-" if sp is None else f"{'>= ' if f['speedup_is_lower_bound'] else ''}{sp}x",
                cell(spread_of("no_hil_robot_minutes_to_80"), "{:.3g}"),
                cell(spread_of("hil_robot_minutes_to_80"), "{:.3g}"),
                "-" if f["robot_minutes_speedup"] is None else f"{f['robot_minutes_speedup']}x",
                "-" if f["intervention_rate_last"] is None else f"{f['intervention_rate_last']:.1%}",
            )
        )
    show(
        "bench hil per task: median [min, max] over seeds (never: a seed that did not reach 80%, counted as +inf; "
        "speedup >= : the no-operator median with such seeds at the budget, a lower bound)",
        (
            "task",
            "seeds (none/op.)",
            "no operator: s to 80%",
            "operator: s to 80%",
            "speedup",
            "no operator: robot-min",
            "operator: robot-min",
            "speedup (robot-min)",
            "intervention rate, last 10%",
        ),
        cells,
    )
    print(
        f"learning curves: {root / 'learning_curves.png'}; reward classifier: precision {clf['precision']}, "
        f"recall {clf['recall']} on held-out episodes"
    )
    # the unsuffixed keys: push's (as earlier runs reported them), else the first task run
    head_task = "push" if "push" in per_task else next(iter(per_task), "push")
    push = per_task.get(head_task, {})
    hil0 = runs.get(head_task, {}).get("hil", [{}])
    figures: dict[str, object] = {
        **{f"hil_speedup_{t}": f["speedup"] for t, f in per_task.items()},
        **{f"hil_speedup_{t}_is_lower_bound": f["speedup_is_lower_bound"] for t, f in per_task.items()},
        **{f"intervention_rate_last_{t}": f["intervention_rate_last"] for t, f in per_task.items()},
        **{f"hil_speedup_env_steps_{t}": f["speedup_env_steps"] for t, f in per_task.items()},
        **{f"robot_minutes_speedup_{t}": f["robot_minutes_speedup"] for t, f in per_task.items()},
        **{
            f"{arm}_robot_minutes_to_80_{t}": f[f"{arm}_robot_minutes_to_80"]
            for t, f in per_task.items()
            for arm in ARMS
        },
        # push's figures (or the first task's: `headline_task`) under the keys earlier runs of this bench reported
        "headline_task": head_task,
        "hil_seconds_to_80": push.get("hil_seconds_to_80"),
        "no_hil_seconds_to_80": push.get("no_hil_seconds_to_80"),
        "speedup": push.get("speedup"),
        "speedup_is_lower_bound": push.get("speedup_is_lower_bound"),
        "robot_minutes_speedup": push.get("robot_minutes_speedup"),
        "intervention_rate_last": push.get("intervention_rate_last"),
        "correction_to_policy_s": hil0[0].get("correction_to_policy_s") if hil0 else None,
        "precision": clf["precision"],
        "recall": clf["recall"],
        "classifier": clf,
        "tasks": per_task,
        "budget_s": budget,
        "seeds": seeds,
    }
    emit(figures)
    return 0
