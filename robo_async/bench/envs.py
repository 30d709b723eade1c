"""`robo-async bench envs`: other people's environments as tasks. Per task: the bare env's steps/s
through its `hal.Robot` against the training actor users run (`actor_over_raw`, as `bench
learn-reach` measures ours), and the seconds to 80% rolling success of `robo-async train` from
state with 20 scripted demonstrations (`buffer demos`), within `budget_s` each: the flow policy
cloned from them (`robo-async bc`, its real-time success is the BC start), then DSRL steering it
with the demonstrations imported (as `bench learn`'s state rows).

    robo-async bench envs [rows=gym_hil,metaworld[,gym_hil-pixels]] [budget_s=1800] [steps=600] [rounds=3] [dir=...]
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from robo_async.bench import emit, register
from robo_async.bench.learn import BC_EVAL, _cli, curve, first_reach
from robo_async.bench.learn_reach import actor_vs_raw

DEMOS = 20


@dataclass(frozen=True)
class EnvRow:
    """One peer environment of the bench: its task, task keys and JSON figure."""

    name: str
    task: str
    keys: tuple[str, ...] = ()  # task.* overrides
    json_key: str = ""  # the JSON figure of its seconds to 80%
    episode: int = 100  # ticks per episode for the rate rounds
    bc_extra: tuple[str, ...] = ()  # more `robo-async bc` overrides
    train_extra: tuple[str, ...] = ()  # more `robo-async train` overrides


ROWS = {
    r.name: r
    for r in (
        EnvRow("gym_hil", "gym_hil", (), "gym_hil_pick_seconds_to_80", 100),
        EnvRow("metaworld", "metaworld", ("task.env_name=pick-place-v3",), "metaworld_pick_place_seconds_to_80", 200),
        # from gym_hil's front and wrist cameras (128 x 128, fed at 64 x 64) and the robot's state, no cube
        # position: the frozen-encoder path (the BC policy's encoder, embeddings stored), as bench learn's pixel rows
        EnvRow(
            "gym_hil-pixels",
            "gym_hil",
            ("task.image_obs=true",),
            "gym_hil_pick_pixels_seconds_to_80",
            100,
            bc_extra=("policy.bc.batch=64",),
            train_extra=("buffer.cache_mb=3000",),
        ),
    )
}


def rates(row: EnvRow, steps: int, rounds: int) -> dict[str, object]:
    from robo_async.config import compose_config
    from robo_async.launch.builders import task_args

    targs = task_args(compose_config([f"task={row.task}", *row.keys]).task)
    return actor_vs_raw(steps, rounds, targs, row.episode)


def bc_prior(row: EnvRow, demos: Path, root: Path) -> tuple[Path, float | None]:
    """The flow policy cloned from the demonstrations, and its real-time success (20 episodes)."""
    out = root / f"bc-{row.name}"
    if not (out / "eval.json").exists():
        _cli(
            [
                "bc",
                f"task={row.task}",
                *row.keys,
                "policy=flow",
                f"policy.bc.from_store={demos}",
                f"run_dir={out}",
                *row.bc_extra,
                *BC_EVAL,
            ],
            3600,
            root / f"bc-{row.name}.log",
        )
    try:
        return out, float(json.loads((out / "eval.json").read_text())["success_rate"])
    except (OSError, KeyError, ValueError):
        return out, None


def learn(row: EnvRow, root: Path, budget_s: float) -> dict[str, object]:
    """`buffer demos` (20 expert episodes), BC, then `train` (DSRL) with them imported, from state."""
    demos = root / f"demos-{row.name}"
    if not (demos / "data.mdb").exists():
        _cli(
            ["buffer", "demos", f"task={row.task}", *row.keys, f"out={demos}", f"episodes={DEMOS}"],
            900,
            root / f"demos-{row.name}.log",
        )
    t_bc = time.monotonic()
    bc_dir, bc_success = bc_prior(row, demos, root)
    bc_wall = round(time.monotonic() - t_bc, 1)  # cloning and its 20 real-time evaluation episodes
    run_dir = root / row.name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    t0 = time.monotonic()
    res = _cli(
        [
            "train",
            f"task={row.task}",
            *row.keys,
            "policy=flow",
            f"policy.path={bc_dir}",
            "algo=dsrl",
            f"buffer.imports=[{{path: {demos}, table: demos}}]",
            *row.train_extra,
            f"run_dir={run_dir}",
            f"budget.seconds={budget_s:g}",
            "stop_at_success=0.9",
            "eval_episodes=20",
        ],
        budget_s + 900,
        root / f"{row.name}.log",
    )
    final = None
    for line in (root / f"{row.name}.log").read_text().splitlines():
        if line.startswith("evaluation: success rate"):
            final = int(line.split()[3].rstrip("%")) / 100
    points = curve(run_dir) if (run_dir / "metrics.jsonl").exists() else []
    t80, s80 = first_reach(points, 0.8)
    t90, _ = first_reach(points, 0.9)
    return {
        "seconds_to_80": t80,
        "env_steps_to_80": s80,
        "seconds_to_90": t90,
        "final_success": final,
        "bc_start_success": bc_success,
        "bc_wall_s": bc_wall,
        "env_steps": points[-1][1] if points else 0,
        "wall_s": round(time.monotonic() - t0, 1),
        "returncode": res.returncode,
        "run_dir": str(run_dir),
        "curve": points,
    }


@register("envs")
def bench_envs(args: dict[str, str]) -> int:
    names = [n for n in args.get("rows", "gym_hil,metaworld").split(",") if n]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        from robo_async.config import UserError

        raise UserError(f"bench envs: unknown rows {unknown}; rows: {sorted(ROWS)}")
    root = Path(args.get("dir") or Path("runs") / f"bench-envs-{time.strftime('%Y%m%d-%H%M%S')}")
    root.mkdir(parents=True, exist_ok=True)
    print(f"working in {root}")
    budget_s, steps, rounds = float(args.get("budget_s", 1800)), int(args.get("steps", 600)), int(args.get("rounds", 3))
    out: dict[str, dict] = {}
    for n in names:
        row = ROWS[n]
        print(f"row {n}: bare env vs the actor ({rounds} rounds of {steps} ticks) ...", flush=True)
        fig: dict[str, object] = dict(rates(row, steps, rounds))
        if args.get("skip_learning", "false") != "true":
            print(f"row {n}: 20 demonstrations, then training for up to {budget_s:g} s ...", flush=True)
            fig.update(learn(row, root, budget_s))
        out[n] = fig
        (root / f"{n}.json").write_text(json.dumps(fig))
    table = Table(title="bench envs")
    for c in (
        "task",
        "bare steps/s",
        "actor steps/s",
        "actor/bare",
        "to 80%: s / env steps",
        "to 90%",
        "final",
        "BC start",
    ):
        table.add_column(c, justify="right" if c != "task" else "left")
    for n, f in out.items():
        t80 = f.get("seconds_to_80")
        table.add_row(
            n,
            f"{f['sim_steps_per_s_raw']:.0f}",
            f"{f['sim_steps_per_s_actor']:.0f}",
            f"{f['actor_over_raw']:.2f}",
            f"{t80:.0f} / {f['env_steps_to_80']}" if t80 is not None else "-",
            f"{f['seconds_to_90']:.0f}" if f.get("seconds_to_90") is not None else "-",
            f"{f['final_success']:.0%}" if f.get("final_success") is not None else "-",
            f"{f['bc_start_success']:.0%}" if f.get("bc_start_success") is not None else "-",
        )
    Console().print(table)
    figures: dict[str, object] = {ROWS[n].json_key: f.get("seconds_to_80") for n, f in out.items()}
    figures.update({f"actor_over_raw_{n}": f["actor_over_raw"] for n, f in out.items()})
    figures["libero_dsrl_gain_pts"] = None  # no LIBERO task yet (docs/guides/environments.md)
    figures["rows"] = {n: {k: v for k, v in f.items() if k != "curve"} for n, f in out.items()}
    emit(figures)
    return 0
