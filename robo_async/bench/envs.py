"""`robo-async bench envs`: other people's environments as tasks. Per task: the bare env's steps/s
through its `hal.Robot` against the training actor users run (`actor_over_raw`, as `bench
learn-reach` measures ours), and the seconds (and robot-minutes: env steps / the task's control
rate) to 80% rolling success of `robo-async train` from state with 20 scripted demonstrations
(`buffer demos`), within `budget_s` each, for `seeds` seeds (median and [min, max]): the flow
policy cloned from them once (`robo-async bc`, its real-time success is the BC start; a figure is
marked BC where that start is already at 80%), then DSRL steering it with the demonstrations
imported (as `bench learn`'s state rows), one train run per seed.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from robo_async.bench import emit, register, show
from robo_async.bench.learn_reach import actor_vs_raw
from robo_async.bench.row_figures import (
    REACH_KEYS,
    control_hz,
    curve,
    plot,
    reach_figures,
    read_final,
    utd_reached,
)
from robo_async.bench.rows import BC_EVAL, _cli
from robo_async.bench.seeds import cell, merge, of
from robo_async.commands.args import arg

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
    # dsrl: a flow policy cloned from the demonstrations, steered by DSRL; sb3: SB3 SAC+HER (sb3_her.py); sac or rlpd:
    # policy=mlp from scratch, the demonstrations in its replay (no BC start)
    recipe: str = "dsrl"
    demos: str = ""  # the demonstrations' directory name (rows of one task setting share them); "": the row's
    # the task keys the demonstrations are recorded with (None: the row's own, less task.realtime); e.g. the
    # cube at one place while the row's task puts it anywhere (demonstrations from one start)
    demo_keys: tuple[str, ...] | None = None
    robot_minutes: float | None = None  # a robot-time budget too (budget.env_steps at the task's rate)


FIXED_CUBE = "task.kwargs=[[random_block_position,false],[reset_delay_seconds,0.0]]"  # gym_hil's default cube
REALTIME = "task.realtime=true"  # the actor at the task's rate (10 Hz): the learner does what it can meanwhile


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
        # per robot-minute (issue 39): the cube where gym_hil puts it by default, the actor real-time paced
        EnvRow(
            "gym_hil-fixed-rlpd",
            "gym_hil",
            (FIXED_CUBE, REALTIME),
            "gym_hil_fixed_seconds_to_80",
            recipe="rlpd",
            demos="gym_hil-fixed",
            # on a 2-core CPU compute caps the UTD of a real-time run: two LayerNorm critics update in 29 ms,
            # ten in 109 ms (1 thread), so about 3.5 against 0.9 updates per env step at 10 Hz
            train_extra=("algo.critics=2",),
        ),
        # demonstrations from one start (the default cube place), a task that puts the cube anywhere
        EnvRow(
            "gym_hil-random-onestart-rlpd",
            "gym_hil",
            (REALTIME,),
            "gym_hil_random_onestart_seconds_to_80",
            recipe="rlpd",
            demos="gym_hil-fixed",
            demo_keys=(FIXED_CUBE,),
            train_extra=("algo.critics=2",),
        ),
        # goal-conditioned (issue 39): FetchPush from state, hindsight relabelling, 20 scripted demonstrations in
        # the replay, 30 robot-minutes at 25 Hz; against SB3's SAC+HER on the same budget and demonstrations
        EnvRow(
            "fetch_push-her",
            "fetch",
            (),
            "fetch_push_her_seconds_to_80",
            50,
            recipe="sac",
            train_extra=("algo.her=future", "algo.gamma=0.95"),
            robot_minutes=30.0,
        ),
        EnvRow(
            "fetch_push-sb3-her", "fetch", (), "fetch_push_sb3_her_seconds_to_80", 50, recipe="sb3", robot_minutes=30.0
        ),
        EnvRow(
            "gym_hil-fixed-sac",
            "gym_hil",
            (FIXED_CUBE, REALTIME),
            "gym_hil_fixed_sac_seconds_to_80",
            recipe="sac",
            demos="gym_hil-fixed",
        ),
    )
}


def rates(row: EnvRow, steps: int, rounds: int) -> dict[str, object]:
    from robo_async.config import compose_config
    from robo_async.launch.builders import task_args

    keys = [k for k in row.keys if k != REALTIME]  # the rates compare as-fast-as-possible stepping
    targs = task_args(compose_config([f"task={row.task}", *keys]).task)
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


def starting_point(row: EnvRow, demos: Path, root: Path) -> tuple[float | None, list[str]]:
    """The BC start's success (None: none) and the train overrides of the row's recipe: dsrl steers
    the flow policy cloned from the demonstrations; sac and rlpd learn policy=mlp from scratch with
    the demonstrations in the replay."""
    if row.recipe == "dsrl":
        bc_dir, bc_success = bc_prior(row, demos, root)
        return bc_success, ["policy=flow", f"policy.path={bc_dir}", "algo=dsrl"]
    return None, ["policy=mlp", f"algo={row.recipe}"]


def sb3_learn(row: EnvRow, budget_s: float, seed: int, hz: float) -> dict[str, object]:
    """The SB3 SAC+HER baseline (`sb3_her.py`) on the row's env, budget and 20 demonstrations of the task's expert."""
    from robo_async.bench.sb3_her import SB3Her, run
    from robo_async.config import compose_config
    from robo_async.launch.tasks import make_robot, task_args

    try:
        import stable_baselines3  # noqa: F401
    except ImportError as e:
        from robo_async.config import UserError

        raise UserError(
            f"bench envs row {row.name} needs stable-baselines3: pip install -e '.[baselines]' ({e})"
        ) from None
    robot = make_robot(task_args(compose_config([f"task={row.task}", *row.keys]).task))
    steps = int(round((row.robot_minutes or 30.0) * 60 * hz))
    res = run(SB3Her(robot.config.env_id, steps, budget_s, seed, DEMOS), robot.expert_callable())
    points = res["curve"]
    return {
        "seed": seed,
        **reach_figures(points, None, hz),
        "final_success": res["final_success"],
        "bc_start_success": None,
        "env_steps": res["env_steps"],
        "robot_minutes": round(res["env_steps"] / hz / 60, 2),
        "utd_reached": res["utd_reached"],
        "wall_s": res["wall_s"],
        "returncode": 0,
        "curve": points,
    }


def learn(row: EnvRow, root: Path, budget_s: float, seed: int = 0) -> dict[str, object]:
    """`buffer demos` (20 expert episodes), BC (both once per row), then `train` (DSRL, `seed`)
    with them imported, from state. The `sb3` recipe runs SB3's SAC+HER instead (`sb3_learn`)."""
    hz = control_hz(row.task, row.keys)
    if row.recipe == "sb3":
        return sb3_learn(row, budget_s, seed, hz)
    demos = root / f"demos-{row.demos or row.name}"
    if not (demos / "data.mdb").exists():  # recorded as fast as the simulator goes
        keys = list(row.demo_keys) if row.demo_keys is not None else [k for k in row.keys if k != REALTIME]
        _cli(
            ["buffer", "demos", f"task={row.task}", *keys, f"out={demos}", f"episodes={DEMOS}"],
            900,
            root / f"demos-{row.demos or row.name}.log",
        )
    t_bc = time.monotonic()
    bc_success, start = starting_point(row, demos, root)
    bc_wall = round(time.monotonic() - t_bc, 1)  # cloning and its 20 real-time evaluation episodes
    run_dir = root / f"{row.name}-s{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    t0 = time.monotonic()
    res = _cli(
        [
            "train",
            f"task={row.task}",
            *row.keys,
            *start,
            f"buffer.imports=[{{path: {demos}, table: demos}}]",
            *row.train_extra,
            f"seed={seed}",
            f"run_dir={run_dir}",
            f"budget.seconds={budget_s:g}",
            *([f"budget.env_steps={int(round(row.robot_minutes * 60 * hz))}"] if row.robot_minutes else []),
            "stop_at_success=0.9",
            "eval_episodes=20",
        ],
        budget_s + 900,
        root / f"{row.name}-s{seed}.log",
    )
    points = curve(run_dir) if (run_dir / "metrics.jsonl").exists() else []
    env_steps = points[-1][1] if points else 0
    return {
        "seed": seed,
        **reach_figures(points, bc_success, hz),
        "final_success": read_final(root / f"{row.name}-s{seed}.log"),
        "bc_start_success": bc_success,
        "bc_wall_s": bc_wall,
        "env_steps": env_steps,
        "robot_minutes": round(env_steps / hz / 60, 2),
        "utd_reached": utd_reached(run_dir) if (run_dir / "metrics.jsonl").exists() else None,
        "wall_s": round(time.monotonic() - t0, 1),
        "returncode": res.returncode,
        "run_dir": str(run_dir),
        "curve": points,
    }


VALUES = ("final_success", "bc_start_success", "env_steps", "robot_minutes", "wall_s", "utd_reached")


@dataclass(frozen=True, kw_only=True)
class EnvsKeys:
    """The keys of `robo-async bench envs`."""

    rows: tuple[str, ...] = arg(("gym_hil", "metaworld"), help=f"rows to run: {', '.join(ROWS)}")
    seeds: int = arg(3, help="train runs per row (seed=0..seeds-1; 1 for a quick look)")
    budget_s: float = arg(1800.0, help="wall-clock budget of each train run, s")
    steps: int = arg(600, help="ticks per round of the bare env vs actor rate")
    rounds: int = arg(3, help="rounds of the rate comparison")
    skip_learning: bool = arg(False, help="measure the rates only, no demonstrations, BC or training")
    dir: Path | None = arg(None, help="bench directory; seeds saved there are not rerun (none: runs/bench-envs-<date>)")


def reach_cell(f: dict, key: str, fmt: str = "{:.0f}") -> str:
    """A "to X%" figure over seeds, marked `(BC)` where the BC start was already at X%."""
    text = cell(of(f, key), fmt)
    return f"{text} (BC)" if f.get(f"measures_to_{key.rsplit('_', 1)[-1]}") == "bc" else text


@register("envs", EnvsKeys)
def bench_envs(args: EnvsKeys) -> int:
    names = list(args.rows)
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        from robo_async.config import UserError

        raise UserError(f"bench envs: unknown rows {unknown}; rows: {sorted(ROWS)}")
    root = Path(args.dir or Path("runs") / f"bench-envs-{time.strftime('%Y%m%d-%H%M%S')}")
    root.mkdir(parents=True, exist_ok=True)
    print(f"working in {root}")
    budget_s, steps, rounds = args.budget_s, args.steps, args.rounds
    out: dict[str, dict] = {}
    curves: list[dict] = []
    for n in names:
        row = ROWS[n]
        print(f"row {n}: bare env vs the actor ({rounds} rounds of {steps} ticks) ...", flush=True)
        fig: dict[str, object] = dict(rates(row, steps, rounds))
        if not args.skip_learning:
            runs = []
            for seed in range(args.seeds):
                saved = root / f"{n}-s{seed}.json"
                if saved.exists():  # measured by an earlier, interrupted bench in this dir
                    print(f"row {n} seed {seed}: saved in {root}, not run again", flush=True)
                    runs.append(json.loads(saved.read_text()))
                    continue
                print(f"row {n} seed {seed}: 20 demonstrations, then training for up to {budget_s:g} s ...", flush=True)
                runs.append(learn(row, root, budget_s, seed))
                saved.write_text(json.dumps(runs[-1]))
            fig.update(merge(runs, REACH_KEYS, VALUES))
            curves += [{**r, "row": f"{n}-s{r['seed']}"} for r in runs]
        out[n] = fig
        (root / f"{n}.json").write_text(json.dumps(fig))
    cols = (
        "task",
        "bare steps/s",
        "actor steps/s",
        "actor/bare",
        "seeds",
        "s to 80%",
        "robot-min to 80%",
        "env steps to 80%",
        "s to 90%",
        "final",
        "BC start",
        "UTD reached",
    )
    cells = []
    for n, f in out.items():
        learned = "seeds" in f
        cells.append(
            (
                n,
                f"{f['sim_steps_per_s_raw']:.0f}",
                f"{f['sim_steps_per_s_actor']:.0f}",
                f"{f['actor_over_raw']:.2f}",
                str(f.get("seeds", 0)),
                reach_cell(f, "seconds_to_80") if learned else "-",
                reach_cell(f, "robot_minutes_to_80", "{:.3g}") if learned else "-",
                reach_cell(f, "env_steps_to_80") if learned else "-",
                reach_cell(f, "seconds_to_90") if learned else "-",
                cell(of(f, "final_success", reach=False), "{:.0%}", reach=False) if learned else "-",
                cell(of(f, "bc_start_success", reach=False), "{:.0%}", reach=False) if learned else "-",
                cell(of(f, "utd_reached", reach=False), "{:.2g}", reach=False) if learned else "-",
            )
        )
    if curves:  # every seed's rolling success against wall-clock and robot-minutes
        plot(curves, root / "learning_curves.png")
        print(f"learning curves: {root / 'learning_curves.png'}")
    show(
        "bench envs: median [min, max] over seeds (never: a seed that did not get there); (BC): the BC start was "
        "already at 80%",
        cols,
        cells,
    )
    # medians over seeds (a seed that never reached 80% counts as +inf; null: the median seed never did)
    figures: dict[str, object] = {ROWS[n].json_key: f.get("seconds_to_80") for n, f in out.items()}
    for n, f in out.items():  # e.g. gym_hil_pick_robot_minutes_to_80, gym_hil_pick_measures ("bc" or "rl")
        figures[ROWS[n].json_key.replace("seconds_to", "robot_minutes_to")] = f.get("robot_minutes_to_80")
        figures[ROWS[n].json_key.replace("seconds_to_80", "measures")] = f.get("measures_to_80")
    figures.update({f"actor_over_raw_{n}": f["actor_over_raw"] for n, f in out.items()})
    figures["libero_dsrl_gain_pts"] = None  # no LIBERO task yet (docs/guides/environments.md)
    figures["rows"] = {n: {k: v for k, v in f.items() if k != "curve"} for n, f in out.items()}
    emit(figures)
    return 0
