"""`robo-async bench hil`: human-in-the-loop training against the same run without an operator.

Two `robo-async train` runs (the command users run, local launcher, as fast as the learner
allows) of per-step SAC on `push` from state with the same 20 scripted demonstrations (RLPD
mixing), as in `bench learn`'s push-sac row; the HIL run adds the virtual operator
(`teleop=virtual`: it takes over with the scripted expert when the policy strays or stalls, hands
back after `hold_ticks`; never in evaluation episodes) and HG-DAgger on its corrections
(`algo.dagger_weight`). Reported per run: seconds and env steps until 20 deterministic episodes
reach 80% success, operator ticks, the intervention rate (share of all ticks, evaluation episodes
included) in the first and last 10% of the run's env steps, and the correction -> policy time (an
intervention's commit to the first policy version trained after it acting on the robot). Then a
success classifier is trained with `robo-async reward train` on rendered `pick_lift` frames and
its held-out precision and recall are reported.

    robo-async bench hil [budget_s=600] [dir=...] [runs=hil,no_hil[,hil_hold60]]
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from robo_async.bench import register
from robo_async.bench.learn import Row, _cli, run_row, selection

HIL = ("teleop=virtual", "algo.dagger_weight=1.0")
RUNS = {"no_hil": Row("push-sac", "push", "state", "sac"),
        "hil": Row("push-sac-hil", "push", "state", "sac", extra=HIL),
        # longer corrections (runs=hil_hold60 to include it; the JSON's figures use `hil`)
        "hil_hold60": Row("push-sac-hil-hold60", "push", "state", "sac", extra=(*HIL, "teleop.hold_ticks=60"))}


def intervention_rates(run_dir: Path, share: float = 0.1) -> tuple[float | None, float | None]:
    """Operator ticks / all ticks in the first and the last `share` of the run's env steps."""
    from robo_async.learner.metrics import read_metrics

    pts = [(int(r["time/env_steps"]), int(r["hil/operator_ticks"])) for r in read_metrics(run_dir)
           if "hil/operator_ticks" in r]
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
    from robo_async.launch.builders import TaskArgs
    from policies.reward import SuccessClassifier
    from robo_async.launch.experts import record_demos

    store, out = root / "reward-frames", root / "reward-classifier"
    if not (store / "data.mdb").exists():
        record_demos(TaskArgs("pick_lift", {"cameras": ("front",), "image_size": 64, "episode_ticks": 90}), store,
                     episodes=20, max_step=0.05, until_terminated=False, seed=11)
    res = _cli(["reward", "train", f"from={store}", "cameras=[front]", f"updates={updates}", f"out={out}"], 3600,
               root / "reward-classifier.log")
    if res.returncode != 0:
        return {"precision": None, "recall": None}
    m = SuccessClassifier.load(out).meta
    return {"precision": round(m.precision, 4), "recall": round(m.recall, 4), "brier": round(m.brier, 4),
            "threshold": round(m.threshold, 4), "heldout_frames": m.heldout_frames,
            "heldout_positives": m.heldout_positives}


@register("hil")
def bench_hil(args: dict[str, str]) -> int:
    names, root = selection(args, "runs", RUNS, "hil,no_hil", "bench-hil-")
    budget = float(args.get("budget_s", 600))
    print(f"working in {root}", flush=True)
    from robo_async.learner.metrics import read_metrics

    for n in names:
        row = RUNS[n]
        print(f"{n}: training for up to {budget:.0f} s ...", flush=True)
        r = run_row(row, root, budget)
        last = read_metrics(Path(r["run_dir"]))[-1] if (Path(r["run_dir"]) / "metrics.jsonl").exists() else {}
        first_rate, last_rate = intervention_rates(Path(r["run_dir"]))
        r.update({"operator_ticks": int(last.get("hil/operator_ticks", 0)),
                  "takeovers": int(last.get("hil/takeovers", 0)),
                  "intervention_rate_first": first_rate, "intervention_rate_last": last_rate,
                  "correction_to_policy_s": last.get("hil/correction_to_policy_s")})
        (root / f"{n}.json").write_text(json.dumps(r))
        print(f"  {n}: to 80% {r['seconds_to_80']} s / {r['env_steps_to_80']} steps, final {r['final_success']}, "
              f"operator ticks {r['operator_ticks']}", flush=True)
    runs = {n: json.loads((root / f"{n}.json").read_text()) for n in RUNS if (root / f"{n}.json").exists()}
    print("reward classifier (pick_lift, front camera) ...", flush=True)
    clf = classifier(root)
    from robo_async.bench.learn import plot

    plot([{**r, "row": n} for n, r in runs.items()], root / "learning_curves.png")
    table = Table(title=f"bench hil (push, SAC from state, 20 demos, {budget:.0f} s per run, 2 cores)")
    cols = ("seconds_to_80", "env_steps_to_80", "final_success", "operator_ticks", "takeovers",
            "intervention_rate_first", "intervention_rate_last", "correction_to_policy_s", "updates_per_s")
    table.add_column("run")
    for c in cols:
        table.add_column(c, justify="right")
    for n, r in runs.items():
        table.add_row(n, *(f"{r[c]:.3g}" if isinstance(r.get(c), float) else str(r.get(c)) for c in cols))
    Console().print(table)
    print(f"learning curves: {root / 'learning_curves.png'}; reward classifier: precision {clf['precision']}, "
          f"recall {clf['recall']} on held-out episodes")
    hil, base = runs.get("hil", {}), runs.get("no_hil", {})
    t_hil, t_base = hil.get("seconds_to_80"), base.get("seconds_to_80")
    figures = {
        "hil_seconds_to_80": t_hil, "no_hil_seconds_to_80": t_base,
        "hil_env_steps_to_80": hil.get("env_steps_to_80"), "no_hil_env_steps_to_80": base.get("env_steps_to_80"),
        # a run that never reached 80% counts as its whole budget (the speedup is then a lower bound)
        "speedup": round((t_base or budget) / t_hil, 2) if t_hil else None,
        "speedup_is_lower_bound": bool(t_hil and not t_base),
        "operator_ticks": hil.get("operator_ticks"), "takeovers": hil.get("takeovers"),
        "intervention_rate_first": hil.get("intervention_rate_first"),
        "intervention_rate_last": hil.get("intervention_rate_last"),
        "correction_to_policy_s": hil.get("correction_to_policy_s"),
        "hil_final_success": hil.get("final_success"), "no_hil_final_success": base.get("final_success"),
        "precision": clf["precision"], "recall": clf["recall"], "classifier": clf}
    print(json.dumps(figures))
    return 0
