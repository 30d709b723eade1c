"""The per-robot-minute rows (issue 39): what `bench envs` and `bench learn` run for SAC and RLPD,
and the UTD a run reached, read from its metrics."""

import json
from pathlib import Path

from robo_async.bench.envs import FIXED_CUBE, REALTIME, ROWS, starting_point
from robo_async.bench.learn import ROWS as LEARN_ROWS
from robo_async.bench.row_figures import utd_reached
from robo_async.config import compose_config


def test_the_fixed_cube_rows_learn_from_scratch_real_time_with_the_demos_shared(tmp_path):
    rlpd, sac = ROWS["gym_hil-fixed-rlpd"], ROWS["gym_hil-fixed-sac"]
    assert rlpd.demos == sac.demos  # one set of demonstrations for both
    assert REALTIME in rlpd.keys and FIXED_CUBE in rlpd.keys
    bc, start = starting_point(rlpd, tmp_path / "demos", tmp_path)
    assert bc is None and start == ["policy=mlp", "algo=rlpd"]  # no BC prior was cloned
    assert not list(tmp_path.iterdir())
    cfg = compose_config(["task=gym_hil", *rlpd.keys, *start, *rlpd.train_extra])
    assert ["random_block_position", False] in [list(kv) for kv in cfg.task.kwargs]
    assert cfg.task.realtime and cfg.algo.critic_layer_norm and cfg.algo.critics == 2


def test_the_learn_rows_of_one_step_presets_pass_the_preset(tmp_path):
    o = LEARN_ROWS["pick_lift-rlpd-realtime"].overrides(tmp_path / "d", None)
    assert "algo=rlpd" in o and "policy=mlp" in o and "policy=flow" not in o
    assert "task.realtime=true" in o
    cfg = compose_config(o)
    assert cfg.algo.name == "sac" and cfg.algo.critic_layer_norm and cfg.buffer.mix["demos"] == cfg.buffer.mix["online"]


def test_the_real_time_one_step_rows_act_as_users_runs_do_and_their_forward_twins_a_tick_ahead(tmp_path):
    from robo_async.launch.builders import build_plan

    for algo in ("sac", "rlpd"):
        users, forward = LEARN_ROWS[f"pick_lift-{algo}-realtime"], LEARN_ROWS[f"pick_lift-{algo}-realtime-forward"]
        assert (users.algo, users.extra) == (forward.algo, forward.extra)  # the same run, acting otherwise
        got = {
            row.name: str(
                build_plan(compose_config(row.overrides(tmp_path / "d", None)), tmp_path / row.name)
                .actors[0]
                .loop.inference
            )
            for row in (users, forward)
        }
        assert got == {users.name: "sync_bounded", forward.name: "async_forward"}


def test_the_real_time_pixel_row_steers_the_frozen_pixel_prior_at_the_tasks_rate(tmp_path):
    o = LEARN_ROWS["pick_lift-pixels-frozen-realtime"].overrides(tmp_path / "d", tmp_path / "bc")
    assert o[: len(LEARN_ROWS["pick_lift-pixels-frozen"].overrides(tmp_path / "d", tmp_path / "bc"))] == (
        LEARN_ROWS["pick_lift-pixels-frozen"].overrides(tmp_path / "d", tmp_path / "bc")
    )  # the frozen row's overrides, then real time
    cfg = compose_config(o)
    assert cfg.task.realtime and cfg.actor.inference == "async_forward" and cfg.algo.name == "dsrl"
    assert list(cfg.policy.cameras) == ["front", "wrist"] and cfg.policy.path == str(tmp_path / "bc")


def test_utd_reached_is_updates_per_env_step_at_the_end(tmp_path: Path):
    rows = [
        {"time/env_steps": 0, "time/updates": 0},
        {"time/env_steps": 100, "time/updates": 50},
        {"time/env_steps": 400, "time/updates": 1000},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert utd_reached(tmp_path) == 2.5


def test_the_one_start_row_trains_on_a_random_cube_with_the_fixed_cube_demonstrations(tmp_path, monkeypatch):
    import robo_async.bench.envs as envs

    row = ROWS["gym_hil-random-onestart-rlpd"]
    assert FIXED_CUBE not in row.keys and row.demo_keys == (FIXED_CUBE,)
    assert row.demos == ROWS["gym_hil-fixed-rlpd"].demos  # the same 20 demonstrations as the fixed rows
    calls = []

    def fake_cli(args, timeout, log):
        calls.append(args)
        raise StopIteration  # the recording command is all this test reads

    monkeypatch.setattr(envs, "_cli", fake_cli)
    try:
        envs.learn(row, tmp_path, 1.0)
    except StopIteration:
        pass
    assert calls[0][:2] == ["buffer", "demos"] and FIXED_CUBE in calls[0] and REALTIME not in calls[0]


def test_bench_hil_one_start_records_from_one_cube_place_and_trains_on_the_spread(tmp_path, monkeypatch):
    import robo_async.bench.rows as rows
    from robo_async.bench.hil import run_of

    row = run_of("pick_lift", "hil", 0, demos="one_start")
    spread = run_of("pick_lift", "hil", 0)
    assert row.name == "pick_lift-hil-onestart-s0" and spread.name == "pick_lift-hil-s0"
    assert not any("cube_xy" in o for o in row.overrides(tmp_path / "d", None))  # training: the cube anywhere
    assert rows.demos_dir(row, tmp_path) != rows.demos_dir(spread, tmp_path)
    calls = []
    monkeypatch.setattr(rows, "_cli", lambda args, timeout, log: calls.append(args))
    rows.record_demos(row.task, row.obs, rows.demos_dir(row, tmp_path), tmp_path / "log", row.demo_keys)
    assert "task.cube_xy=[0.185,0.0]" in calls[0]
    assert compose_config(["task=pick_lift", *row.demo_keys]).task.cube_xy == [0.185, 0.0]


def test_bench_hil_headlines_the_task_it_ran_when_push_is_not_among_them(tmp_path, capsys):
    """The unsuffixed keys (`robot_minutes_speedup`, `intervention_rate_last`) are push's, else the first task's."""
    from robo_async.bench import run_bench
    from robo_async.bench.hil import run_of

    def saved(arm, steps, rate):
        return {
            "row": run_of("pick_lift", arm, 0, demos="one_start").name,
            "seconds_to_80": steps / 40,
            "env_steps_to_80": steps,
            "robot_minutes_to_80": round(steps / 30 / 60, 2),
            "final_success": 0.8,
            "intervention_rate_last": rate,
            "curve": [],
        }

    for arm, steps, rate in (("hil", 8280, 0.08), ("no_hil", 15788, None)):
        r = saved(arm, steps, rate)
        (tmp_path / f"{r['row']}.json").write_text(json.dumps(r))
    argv = ["tasks=[pick_lift]", "seeds=1", "demos=one_start", "classifier=false", f"dir={tmp_path}"]
    assert run_bench("hil", argv) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["headline_task"] == "pick_lift"
    assert last["robot_minutes_speedup"] == last["robot_minutes_speedup_pick_lift"] == 1.91
    assert last["intervention_rate_last"] == 0.08
