"""launcher=serial (learner and one actor in one process), algo=bc behind the algorithm seam,
typed config errors, and the allowance that holds actors by what they produced."""

import subprocess
import sys

import pytest

from robo_async.launch.builders import TaskArgs
from robo_async.launch.experts import record_demos
from robo_async.learner.metrics import read_metrics

EXE = [sys.executable, "-m", "robo_async.cli"]


def run(args, timeout=240):
    return subprocess.run(EXE + args, capture_output=True, text=True, timeout=timeout)


@pytest.mark.e2e
def test_serial_launcher_learns_reach_by_bc_from_recorded_demos(tmp_path):
    demos = tmp_path / "demos"
    n, rate = record_demos(TaskArgs("reach", {}), demos, episodes=60)
    assert n > 0 and rate > 0.9  # the scripted expert, through the control loop and SafeRobot
    run_dir = tmp_path / "run"
    res = run(
        [
            "train",
            "launcher=serial",
            "algo=bc",
            f"run_dir={run_dir}",
            "budget.seconds=60",
            f"buffer.imports=[{{path: {demos}, table: demos}}]",
            "stop_at_success=0.8",
            "success_window=10",
            "eval_episodes=10",
            "learner.log_every_s=0.5",
        ]
    )
    assert res.returncode == 0, res.stderr + res.stdout
    assert "serial" in res.stdout
    rows = read_metrics(run_dir)
    assert rows[-1]["time/updates"] > 100 and rows[-1]["time/env_steps"] > 0
    assert rows[-1]["losses/bc_nll"] < rows[0].get("losses/bc_nll", float("inf"))
    evaluation = [ln for ln in res.stdout.splitlines() if ln.startswith("evaluation: success rate")]
    assert evaluation and int(evaluation[0].split()[3].rstrip("%")) >= 50, res.stdout


@pytest.mark.e2e
def test_wrong_types_and_unknown_keys_are_one_line_at_plan_time(tmp_path):
    for args, want in (
        (["algo.batch_size=abc"], "algo.batch_size: 'abc' is not valid"),
        (["+algo.nope=1"], "unknown key algo.nope"),
        (["task.hz=fast"], "task.hz: 'fast' is not valid"),
        (["actor.flush_every=x"], "actor.flush_every: 'x' is not valid"),
        (["launcher=nope"], "unknown launcher 'nope'"),
    ):
        res = run(["train", f"runs_root={tmp_path}", *args], timeout=60)
        assert res.returncode == 2, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and want in lines[0], (args, res.stderr)
        assert "Traceback" not in res.stderr and "search path" not in res.stderr


@pytest.mark.e2e
def test_policy_algorithm_pairs_that_do_not_fit_are_refused_in_one_line(tmp_path):
    for args, want in (
        (["policy=flow", "algo=sac"], "algo=sac trains policy=mlp, not policy=flow"),
        (["policy=act", "algo=sac"], "algo=sac trains policy=mlp, not policy=lerobot"),
        (["policy=mlp", "algo=qc"], "algo=qc trains a chunk policy from policy=flow"),
        (["policy=act", "algo=qc"], "policy=lerobot does not fit"),
        (
            ["task=pick_lift", "policy=flow", "policy.cameras=[front]", "algo=qc"],
            "policy.cameras ['front'] are not cameras of sim_so101_pick_lift",
        ),
    ):
        res = run(["train", f"runs_root={tmp_path}", *args], timeout=60)
        assert res.returncode == 2, (args, res.stderr, res.stdout)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and want in lines[0], (args, res.stderr)


@pytest.mark.e2e
def test_the_final_evaluation_acts_as_the_run_did(tmp_path):
    """A run with async_forward and injected latency is evaluated in that mode at that latency,
    not in the default mode at 0 ms."""
    import json

    run_dir = tmp_path / "run"
    res = run(
        [
            "train",
            "launcher=serial",
            "task=reach",
            "task.episode_ticks=20",
            "algo=sac",
            "actor.inference=async_forward",
            "policy.inference_delay_ms=40",
            "algo.warmup_steps=50",
            f"run_dir={run_dir}",
            "budget.env_steps=100",
            "stop_at_success=null",
            "eval_episodes=1",
        ]
    )
    assert res.returncode == 0, res.stderr + res.stdout
    ev = json.loads((run_dir / "eval.json").read_text())
    assert ev["mode"] == "async_forward" and ev["inference_delay_ms"] == 40
    assert ev["infer_p50_ms"] >= 40  # the latency was injected into the evaluation's inferences
    assert "(async_forward)" in res.stdout
