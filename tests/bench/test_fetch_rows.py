"""The goal-conditioned rows of `bench envs` (issue 39, item 4): ours (SAC + hindsight relabelling +
20 demonstrations, 30 robot-minutes) and SB3's SAC+HER on the same env, budget and demonstrations."""

import json
from types import SimpleNamespace

import pytest

import robo_async.bench.envs as envs
import robo_async.bench.sb3_her as sb3_her
from sim.fetch import push_expert


def test_our_fetch_row_trains_sac_with_her_on_a_robot_time_budget(tmp_path, monkeypatch):
    calls = []

    def fake_cli(args, timeout, log):
        calls.append(args)
        return SimpleNamespace(returncode=0)

    monkeypatch.setattr(envs, "_cli", fake_cli)
    res = envs.learn(envs.ROWS["fetch_push-her"], tmp_path, 600.0)
    demos, train = calls
    assert demos[:3] == ["buffer", "demos", "task=fetch"] and "episodes=20" in demos
    for key in ("task=fetch", "policy=mlp", "algo=sac", "algo.her=future", "budget.env_steps=45000"):
        assert key in train, (key, train)  # 30 minutes of a 25 Hz robot
    assert res["seed"] == 0 and res["robot_minutes_to_80"] is None


def test_the_sb3_row_runs_the_baseline_on_the_same_budget_and_expert(tmp_path, monkeypatch):
    got = {}

    def fake_run(s, expert):
        got.update(s=s, expert=expert)
        # the 40th episode (the 20th evaluation) at 80%: 1,500 steps (1 robot-minute at 25 Hz)
        curve = [(10.0, 1000, 0.5, 30), (20.0, 1500, 0.8, 40), (30.0, 2000, 0.9, 50)]
        return {"curve": curve, "env_steps": 2000, "wall_s": 30.0, "utd_reached": 0.5, "final_success": 0.9}

    monkeypatch.setattr(sb3_her, "run", fake_run)
    res = envs.learn(envs.ROWS["fetch_push-sb3-her"], tmp_path, 600.0, seed=2)
    s = got["s"]
    assert (s.env_id, s.env_steps, s.demos, s.seed) == ("FetchPush-v4", 45_000, 20, 2)
    assert got["expert"] is push_expert
    assert res["env_steps_to_80"] == 1500 and res["robot_minutes_to_80"] == 1.0 and res["robot_minutes"] == 1.33


def test_bench_envs_reports_both_fetch_rows_in_robot_minutes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        envs,
        "rates",
        lambda row, steps, rounds: {"sim_steps_per_s_raw": 1.0, "sim_steps_per_s_actor": 1.0, "actor_over_raw": 1.0},
    )
    minutes = {"fetch_push-her": 3000, "fetch_push-sb3-her": None}

    def fake_learn(row, root, budget_s, seed=0):
        s80 = minutes[row.name]
        curve = [(1.0, s80, 0.8, 40)] if s80 else [(1.0, 45_000, 0.1, 900)]
        return {"seed": seed, **envs.reach_figures(curve, None, 25.0), "curve": curve, "robot_minutes": 30.0}

    monkeypatch.setattr(envs, "learn", fake_learn)
    from robo_async.bench import run_bench

    assert run_bench("envs", ["rows=[fetch_push-her,fetch_push-sb3-her]", "seeds=1", f"dir={tmp_path}"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["fetch_push_her_robot_minutes_to_80"] == 2.0  # 3,000 steps at 25 Hz
    assert last["fetch_push_sb3_her_robot_minutes_to_80"] is None  # never: null


@pytest.mark.timeout(300)
def test_the_sb3_baseline_counts_evaluation_episodes_as_robot_time_and_replays_the_demos():
    res = sb3_her.run(sb3_her.SB3Her(env_steps=200, learning_starts=50, demos=1, batch_size=32), push_expert)
    curve = res["curve"]
    # after each 50-tick training episode one 50-tick deterministic evaluation episode
    assert [(steps, eps) for _, steps, _, eps in curve] == [(100, 2), (200, 4)]
    # the demonstration and the training ticks (SB3 drops the one a callback stops on)
    assert res["env_steps"] == 200 and res["replayed"] == 50 + 100 - 1
    assert 0.0 <= res["final_success"] <= 1.0


def test_bench_envs_in_a_dir_with_saved_seeds_runs_only_the_missing_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        envs,
        "rates",
        lambda row, steps, rounds: {"sim_steps_per_s_raw": 1.0, "sim_steps_per_s_actor": 1.0, "actor_over_raw": 1.0},
    )
    saved = [(1.0, 1500, 0.8, 40)]
    (tmp_path / "fetch_push-her-s0.json").write_text(
        json.dumps({"seed": 0, **envs.reach_figures(saved, None, 25.0), "curve": saved, "robot_minutes": 30.0})
    )
    ran = []

    def fake_learn(row, root, budget_s, seed=0):
        ran.append(seed)
        curve = [(1.0, 4500, 0.8, 40)]
        return {"seed": seed, **envs.reach_figures(curve, None, 25.0), "curve": curve, "robot_minutes": 30.0}

    monkeypatch.setattr(envs, "learn", fake_learn)
    from robo_async.bench import run_bench

    assert run_bench("envs", ["rows=[fetch_push-her]", "seeds=2", f"dir={tmp_path}"]) == 0
    assert ran == [1]  # seed 0 was saved by an earlier, interrupted bench
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["fetch_push_her_robot_minutes_to_80"] == 2.0  # the median of 1.0 (saved) and 3.0 (run)
