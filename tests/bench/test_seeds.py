"""A learning row over seeds (`bench.seeds`): median, [min, max] and each seed's value, a seed that
never reached X counted as +inf; robot-minutes and what a "to X" figure measures (`bench.row_figures`);
`bench learn`'s report and headline figures over saved seed runs. Pure functions, no training."""

from __future__ import annotations

import json

from robo_async.bench.seeds import Spread, cell, merge, of, spread


def test_the_median_counts_a_seed_that_never_got_there_as_infinite():
    s = spread([120.0, None, 80.0])
    assert (s.median, s.low, s.high, s.n, s.reached) == (120.0, 80.0, None, 3, 2)
    assert spread([None, None, 80.0]).median is None  # the median seed never got there
    assert spread([100.0, None]).median is None  # even count: either middle seed never got there
    assert spread([100.0, 300.0, 200.0, 50.0]).median == 150.0
    assert spread([None, None]) == Spread(None, None, None, 2, (None, None))
    assert spread([]) == Spread(None, None, None, 0, ())


def test_a_figure_that_is_not_a_time_leaves_a_missing_seed_out():
    s = spread([0.9, None, 0.5], reach=False)
    assert (s.median, s.low, s.high, s.n) == (0.7, 0.5, 0.9, 2)
    assert spread([None], reach=False).median is None and spread([None], reach=False).n == 0


def test_merge_keeps_medians_under_the_figures_own_keys_beside_range_and_seeds():
    runs = [
        {"row": "push-qc", "seconds_to_80": 100.0, "final_success": 0.9, "env_steps": 3000, "seed": 0},
        {"row": "push-qc", "seconds_to_80": None, "final_success": 0.6, "env_steps": 9000, "seed": 1},
        {"row": "push-qc", "seconds_to_80": 140.5, "final_success": None, "env_steps": 5000, "seed": 2},
    ]
    for i, r in enumerate(runs):
        r.update(run_dir=f"d{i}", curve=[(1.0, 2, 0.5, 40)])
    row = merge(runs, ["seconds_to_80"], ["final_success", "env_steps"])
    assert row["row"] == "push-qc" and row["seeds"] == 3 and row["seed_numbers"] == [0, 1, 2]
    assert row["run_dirs"] == ["d0", "d1", "d2"] and "curve" not in row and "seed" not in row
    assert row["seconds_to_80"] == 140.5 and row["seconds_to_80_range"] == [100, None]
    assert row["seconds_to_80_seeds"] == [100, None, 140.5]
    assert row["final_success"] == 0.75 and row["final_success_range"] == [0.6, 0.9]
    assert row["env_steps"] == 5000 and isinstance(row["env_steps"], int)
    json.dumps(row)  # a JSON line: no inf, no NaN
    assert of(row, "seconds_to_80") == spread([100.0, None, 140.5])
    assert of({"seconds_to_80": 7.0}, "seconds_to_80").median == 7.0  # a row of one run, no seed lists


def test_a_table_cell_is_median_and_range_and_says_never():
    assert cell(spread([120.0, None, 80.0])) == "120 [80, never]"
    assert cell(spread([None, None, 80.0])) == "never [80, never]"
    assert cell(spread([0.9, 0.5], reach=False), "{:.0%}", reach=False) == "70% [50%, 90%]"
    assert cell(spread([12.34])) == "12"  # one seed: its value
    assert cell(spread([None], reach=False), reach=False) == "-"


def test_robot_minutes_and_what_a_to_x_figure_measures():
    from robo_async.bench.row_figures import reach_figures

    # (elapsed s, env steps, rolling success, episodes): 80% at 600 steps (the 40-episode rule), 90% never
    pts = [(5.0, 300, 0.85, 20), (10.0, 600, 0.85, 40), (20.0, 1200, 0.8, 60)]
    got = reach_figures(pts, bc_success=0.85, hz=10.0)
    assert (got["seconds_to_80"], got["env_steps_to_80"], got["robot_minutes_to_80"]) == (10.0, 600, 1.0)
    assert got["seconds_to_90"] is None and got["robot_minutes_to_90"] is None
    assert got["measures_to_80"] == "bc" and got["measures_to_90"] == "rl"  # the BC start was at 85%
    assert reach_figures(pts, bc_success=None, hz=30.0)["measures_to_80"] == "rl"  # SAC: no BC prior
    assert reach_figures(pts, bc_success=0.5, hz=30.0)["robot_minutes_to_80"] == round(600 / 30 / 60, 2)


def _run(row: str, seed: int, t80: float | None, bc: float | None = 0.3, **kw: object) -> dict:
    steps = None if t80 is None else int(t80 * 30)
    return {
        "row": row,
        "run": f"{row}-s{seed}",
        "seed": seed,
        "task": kw.get("task", "pick_lift"),
        "obs": kw.get("obs", "state"),
        "algo": kw.get("algo", "dsrl"),
        "latency_ms": kw.get("latency_ms", 0.0),
        "realtime": kw.get("realtime", False),
        "seconds_to_80": t80,
        "env_steps_to_80": steps,
        "robot_minutes_to_80": None if steps is None else round(steps / 30 / 60, 2),
        "seconds_to_90": t80,
        "env_steps_to_90": steps,
        "robot_minutes_to_90": None if steps is None else round(steps / 30 / 60, 2),
        "measures_to_80": "bc" if bc is not None and bc >= 0.8 else "rl",
        "measures_to_90": "bc" if bc is not None and bc >= 0.9 else "rl",
        "final_success": 0.9,
        "bc_start_success": bc,
        "env_steps": 9000,
        "hz": 30.0,
    }


def test_bench_learn_reports_each_row_over_its_saved_seeds(tmp_path, capsys):
    from robo_async.bench.learn import figures, report, saved_runs
    from robo_async.bench.row_figures import REACH_KEYS, VALUE_KEYS

    for seed, t in enumerate([300.0, None, 200.0]):
        (tmp_path / f"pick_lift-dsrl-s{seed}.json").write_text(json.dumps(_run("pick_lift-dsrl", seed, t)))
    (tmp_path / "pick_lift-dsrl-realtime-s0.json").write_text(
        json.dumps(_run("pick_lift-dsrl-realtime", 0, 50.0, realtime=True))
    )
    runs = saved_runs(tmp_path, "pick_lift-dsrl")
    assert [r["seed"] for r in runs] == [0, 1, 2]  # not the realtime row's run, in seed order
    rows = [merge(runs, REACH_KEYS, VALUE_KEYS), merge(saved_runs(tmp_path, "pick_lift-dsrl-realtime"), REACH_KEYS)]
    report(rows)
    table = capsys.readouterr().out
    assert "300 [200, never]" in table and "3 " in table
    got = figures(rows)
    # the median over seeds; the wall-clock-simulator row (50 s) is not a state row's headline
    assert got["pick_lift_state_seconds_to_90"] == 300.0
    assert got["pick_lift-dsrl_robot_minutes_to_80"] == 5.0 and got["pick_lift-dsrl_measures_to_80"] == "rl"
    assert got["rows"][0]["seconds_to_80_seeds"] == [300, None, 200]


def test_a_row_whose_bc_start_is_already_there_is_marked_and_not_a_headline(capsys):
    from robo_async.bench.learn import figures, report
    from robo_async.bench.row_figures import REACH_KEYS, VALUE_KEYS

    rows = [merge([_run("pick_lift-qc", s, 12.0, bc=0.95) for s in range(2)], REACH_KEYS, VALUE_KEYS)]
    report(rows)
    out = capsys.readouterr().out
    assert "12 [12, 12] (BC)" in out and "95%" in out
    got = figures(rows)
    assert got["pick_lift-qc_measures_to_80"] == "bc" and got["pick_lift_state_seconds_to_90"] is None


def test_the_control_rate_is_the_one_the_task_builds():
    """Robot-minutes divide by the task's own rate (its robot spec's dt), not a fixed 30 Hz."""
    from robo_async.bench.row_figures import control_hz

    assert control_hz("push") == 30.0
    assert control_hz("gym_hil") == 10.0


def test_bench_learn_in_a_dir_with_saved_seeds_runs_only_the_missing_ones(tmp_path, monkeypatch, capsys):
    import robo_async.bench.learn as learn
    from robo_async.bench import run_bench

    (tmp_path / "pick_lift-sac-realtime-s0.json").write_text(
        json.dumps(_run("pick_lift-sac-realtime", 0, 300.0, bc=None, algo="sac", realtime=True))
    )
    ran = []

    def fake_run_row(row, root, limit):
        ran.append(row.name)
        return {**_run("pick_lift-sac-realtime", 1, None, bc=None, algo="sac", realtime=True), "updates_per_s": 30.0}

    monkeypatch.setattr(learn, "run_row", fake_run_row)
    assert run_bench("learn", ["rows=[pick_lift-sac-realtime]", "seeds=2", f"dir={tmp_path}"]) == 0
    assert ran == ["pick_lift-sac-realtime-s1"]  # seed 0 was saved by an earlier, interrupted bench
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    (row,) = last["rows"]
    assert row["seeds"] == 2 and row["seconds_to_80_seeds"] == [300.0, None]
