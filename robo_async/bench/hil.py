"""`robo-async bench hil`: human-in-the-loop training against the same run without an operator.

Per task (`push` from our sims, gym_hil's PandaPickCube) and per seed, two `robo-async train` runs
(the command users run, local launcher, as fast as the learner allows) of per-step SAC from state
with the same 20 scripted demonstrations (RLPD mixing), as in `bench learn`'s push-sac row; the HIL
arm adds the virtual operator (`teleop=virtual`: it takes over with the scripted expert when the
policy strays or stalls, hands back after `hold_ticks`; never in evaluation episodes) and
HG-DAgger on its corrections (`algo.dagger_weight`). Reported per run: seconds and env steps until
20 deterministic episodes reach 80% success, operator ticks, the intervention rate (share of all
ticks, evaluation episodes included) in the first and last 10% of the run's env steps, and the
correction -> policy time (an intervention's commit to the first policy version trained after it
acting on the robot). Per task: the median over seeds of each arm's seconds to 80% (a seed that did
not reach it counts as its budget, and the speedup is then a lower bound) and their ratio. Then a
success classifier is trained with `robo-async reward train` on rendered `pick_lift` frames and
its held-out precision and recall are reported.

    robo-async bench hil [tasks=push,gym_hil] [seeds=3] [arms=hil,no_hil] [budget_s=600] [classifier=true] [dir=...]
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from robo_async.bench import emit, register
from robo_async.bench.learn import Row, _cli, run_row

HIL = ("teleop=virtual", "algo.dagger_weight=1.0")
TASKS = ("push", "gym_hil")
ARMS = ("hil", "no_hil")


def run_of(task: str, arm: str, seed: int) -> Row:
    """One run of the bench: SAC from state on `task`, with (`hil`) or without the operator."""
    return Row(f"{task}-{arm}-s{seed}", task, "state", "sac", extra=(*(HIL if arm == "hil" else ()), f"seed={seed}"))


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


def _names(args: dict[str, str], key: str, choices: tuple[str, ...]) -> list[str]:
    from robo_async.config import UserError

    names = [n for n in args.get(key, ",".join(choices)).split(",") if n]
    unknown = [n for n in names if n not in choices]
    if unknown:
        raise UserError(f"bench hil: unknown {key} {unknown}; {key}: {', '.join(choices)}")
    return names


def median_seconds(runs: list[dict], budget: float, key: str = "seconds_to_80") -> tuple[float | None, bool]:
    """The median of `key` (seconds, or env steps, to 80%) over seeds, a seed that never reached
    80% counted as `budget` (for env steps: the run's own env steps); and whether that median is
    such a censored value (then only a bound)."""
    if not runs:
        return None, False
    stand_in = (lambda r: budget) if key == "seconds_to_80" else (lambda r: float(r.get("env_steps", 0)))
    times = [r[key] if r.get(key) is not None else stand_in(r) for r in runs]
    med = statistics.median(times)
    return round(med, 1), sum(r.get(key) is None for r in runs) * 2 >= len(runs)


def summarize_task(runs: dict[str, list[dict]], budget: float) -> dict[str, object]:
    """Per task: each arm's median seconds to 80% and the speedup (no operator over operator)."""
    t_hil, hil_censored = median_seconds(runs.get("hil", []), budget)
    t_base, base_censored = median_seconds(runs.get("no_hil", []), budget)
    rates = [r["intervention_rate_last"] for r in runs.get("hil", []) if r.get("intervention_rate_last") is not None]
    # env steps: the same comparison, blind to how much CPU each run had (the machine is shared)
    s_hil, s_hil_c = median_seconds(runs.get("hil", []), budget, "env_steps_to_80")
    s_base, s_base_c = median_seconds(runs.get("no_hil", []), budget, "env_steps_to_80")
    return {
        "hil_env_steps_to_80": None if s_hil_c else s_hil,
        "no_hil_env_steps_to_80": None if s_base_c else s_base,
        "speedup_env_steps": None if (not s_hil or not s_base or s_hil_c) else round(s_base / s_hil, 2),
        "hil_seconds_to_80": None if hil_censored else t_hil,
        "no_hil_seconds_to_80": None if base_censored else t_base,
        # the operator's arm did not reach 80% in most seeds: no figure; the other arm did not: a lower bound
        "speedup": None if (t_hil is None or t_base is None or hil_censored) else round(t_base / t_hil, 2),
        "speedup_is_lower_bound": bool(base_censored and not hil_censored),
        "intervention_rate_last": round(statistics.median(rates), 4) if rates else None,
        "seeds": {arm: [r.get("seconds_to_80") for r in rs] for arm, rs in runs.items()},
    }


@register("hil")
def bench_hil(args: dict[str, str]) -> int:
    tasks, arms = _names(args, "tasks", TASKS), _names(args, "arms", ARMS)
    seeds = int(args.get("seeds", 3))
    root = Path(args.get("dir") or tempfile.mkdtemp(prefix="bench-hil-"))
    root.mkdir(parents=True, exist_ok=True)
    budget = float(args.get("budget_s", 600))
    print(f"working in {root}", flush=True)
    from robo_async.learner.metrics import read_metrics

    for task in tasks:
        for seed in range(seeds):
            for arm in arms:
                row = run_of(task, arm, seed)
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
                json.loads((root / f"{run_of(task, arm, s).name}.json").read_text())
                for s in range(seeds)
                if (root / f"{run_of(task, arm, s).name}.json").exists()
            ]
            for arm in arms
        }
        for task in tasks
    }
    clf: dict[str, object] = {"precision": None, "recall": None}
    if args.get("classifier", "true") == "true":
        print("reward classifier (pick_lift, front camera) ...", flush=True)
        clf = classifier(root)
    from robo_async.bench.learn import plot

    every = [{**r, "row": r["row"]} for t in runs.values() for rs in t.values() for r in rs]
    plot(every, root / "learning_curves.png")
    table = Table(title=f"bench hil (SAC from state, 20 demos, {budget:.0f} s per run, {seeds} seeds, 2 cores)")
    cols = (
        "seconds_to_80",
        "env_steps_to_80",
        "final_success",
        "operator_ticks",
        "takeovers",
        "intervention_rate_first",
        "intervention_rate_last",
        "correction_to_policy_s",
        "updates_per_s",
    )
    table.add_column("run")
    for c in cols:
        table.add_column(c, justify="right")
    for r in every:
        table.add_row(r["row"], *(f"{r[c]:.3g}" if isinstance(r.get(c), float) else str(r.get(c)) for c in cols))
    Console().print(table)
    per_task = {task: summarize_task(rs, budget) for task, rs in runs.items()}
    summary = Table(title="median over seeds (a seed that did not reach 80% counts as the budget)")
    for c in (
        "task",
        "no operator: s to 80%",
        "operator: s to 80%",
        "speedup",
        "env steps: none / operator",
        "speedup (env steps)",
        "intervention rate, last 10%",
    ):
        summary.add_column(c, justify="left" if c == "task" else "right")
    for task, f in per_task.items():
        sp = f["speedup"]
        summary.add_row(
            task,
            str(f["no_hil_seconds_to_80"] or f"> {budget:.0f}"),
            str(f["hil_seconds_to_80"] or "-"),
            "-" if sp is None else f"{'>= ' if f['speedup_is_lower_bound'] else ''}{sp}x",
            f"{f['no_hil_env_steps_to_80'] or '-'} / {f['hil_env_steps_to_80'] or '-'}",
            "-" if f["speedup_env_steps"] is None else f"{f['speedup_env_steps']}x",
            "-" if f["intervention_rate_last"] is None else f"{f['intervention_rate_last']:.1%}",
        )
    Console().print(summary)
    print(
        f"learning curves: {root / 'learning_curves.png'}; reward classifier: precision {clf['precision']}, "
        f"recall {clf['recall']} on held-out episodes"
    )
    push = per_task.get("push", {})
    hil0 = runs.get("push", {}).get("hil", [{}])
    figures: dict[str, object] = {
        **{f"hil_speedup_{t}": f["speedup"] for t, f in per_task.items()},
        **{f"hil_speedup_{t}_is_lower_bound": f["speedup_is_lower_bound"] for t, f in per_task.items()},
        **{f"intervention_rate_last_{t}": f["intervention_rate_last"] for t, f in per_task.items()},
        **{f"hil_speedup_env_steps_{t}": f["speedup_env_steps"] for t, f in per_task.items()},
        # push's figures under the keys earlier runs of this bench reported
        "hil_seconds_to_80": push.get("hil_seconds_to_80"),
        "no_hil_seconds_to_80": push.get("no_hil_seconds_to_80"),
        "speedup": push.get("speedup"),
        "speedup_is_lower_bound": push.get("speedup_is_lower_bound"),
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
