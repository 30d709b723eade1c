"""`robo-async bc`: behaviour cloning of the flow chunk policy from expert demos or a store's demos
table, saved weights loaded back by the actor's policy builder, and the bad inputs."""

import json
import subprocess
import sys

import numpy as np
import pytest
from omegaconf import OmegaConf

from robo_async.config import compose_config
from robo_async.launch.builders import ConfigError, PolicyArgs, make_actor_policy, task_args, task_spec

EXE = [sys.executable, "-m", "robo_async.cli"]
SMALL = [
    "policy=flow",
    "policy.hidden=[64,64]",
    "policy.horizon=6",
    "policy.bc.batch=64",
    "task.episode_ticks=40",
    "eval_episodes=2",
]


def run(args, timeout=240):
    return subprocess.run(EXE + args, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def bc_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("bc") / "reach-bc"
    res = run(
        [
            "bc",
            f"run_dir={run_dir}",
            "policy.bc.demos=6",
            "policy.bc.steps=150",
            "actor.inference=async_forward_rtc",
            "policy.inference_delay_ms=50",
            *SMALL,
        ]
    )
    assert res.returncode == 0, res.stderr + res.stdout
    return run_dir, res


@pytest.mark.e2e
def test_bc_writes_weights_plot_and_evaluation(bc_run):
    run_dir, res = bc_run
    for name in ("policy.safetensors", "policy.yaml", "bc_loss.png", "eval.json", "config.yaml"):
        assert (run_dir / name).exists(), name
    ev = json.loads((run_dir / "eval.json").read_text())
    assert ev["episodes"] == 2 and ev["mode"] == "async_forward_rtc"
    assert ev["success_rate"] in (0.0, 0.5, 1.0)  # judged per episode, over the 2 episodes
    assert ev["latency_p50_ms"] >= 50  # the injected latency was in the loop
    assert f"results in {run_dir}" in res.stdout


def test_saved_weights_load_into_the_actor_policy(bc_run):
    run_dir, _ = bc_run
    cfg = compose_config(SMALL + [f"policy.path={run_dir}", "policy.inference_delay_ms=[10,20]"])
    pargs = PolicyArgs.from_config(OmegaConf.to_container(cfg.policy, resolve=True))
    spec = task_spec(task_args(cfg.task))
    p = make_actor_policy(pargs, spec, deterministic=True)
    assert p.version == 0 and p.delay_ms == 10 and p.jitter_ms == 10  # a DelayedPolicy around the flow policy
    from safetensors.numpy import load_file

    saved = load_file(str(run_dir / "policy.safetensors"))
    np.testing.assert_array_equal(p.weights()["net.0.weight"], saved["net.0.weight"])
    bigger = compose_config(SMALL + [f"policy.path={run_dir}", "policy.hidden=[128,128]"])
    with pytest.raises(ConfigError, match="expects"):
        make_actor_policy(PolicyArgs.from_config(OmegaConf.to_container(bigger.policy, resolve=True)), spec)


@pytest.mark.e2e
def test_bc_from_a_store_demos_table(tmp_path):
    store = tmp_path / "demos"
    res = run(["buffer", "demos", f"out={store}", "episodes=3"])
    assert res.returncode == 0, res.stderr + res.stdout
    res = run(
        [
            "bc",
            f"run_dir={tmp_path / 'b'}",
            f"policy.bc.from_store={store}",
            "policy.bc.steps=20",
            *SMALL[:-1],
            "eval_episodes=0",
        ]
    )
    assert res.returncode == 0, res.stderr + res.stdout
    assert "3 episodes from" in res.stdout and (tmp_path / "b" / "policy.safetensors").exists()
    cams = tmp_path / "cams"
    res = run(["buffer", "demos", f"out={cams}", "episodes=1", "cameras=front", "image_size=32"])
    assert res.returncode == 0, res.stderr + res.stdout
    res = run(
        [
            "bc",
            f"run_dir={tmp_path / 'c'}",
            f"policy.bc.from_store={cams}",
            "policy.bc.steps=20",
            "task.cameras=[front]",
            "task.image_size=64",
            "policy.cameras=[front]",
            *SMALL[:-1],
            "eval_episodes=0",
        ]
    )
    assert (
        res.returncode == 2
        and "demonstrations' front is 32x32x3 per tick, the task's camera front is 64x64x3" in res.stderr
        and str(cams) in res.stderr
    )
    assert not (tmp_path / "c" / "policy.safetensors").exists()


@pytest.mark.e2e
def test_bc_bad_inputs_are_one_clear_line(tmp_path):
    root = f"runs_root={tmp_path / 'runs'}"
    res = run(["bc", "policy=mlp", root])
    assert res.returncode == 2 and "bc trains the flow chunk policy" in res.stderr
    res = run(["bc", *SMALL, "policy.bc.steps=0", root])
    assert res.returncode == 2 and "give policy.path" in res.stderr
    res = run(["bc", *SMALL, f"policy.bc.from_store={tmp_path / 'empty'}", root])
    assert res.returncode == 2 and "not a replay store" in res.stderr
    assert not (tmp_path / "runs").exists()  # a refused command leaves no empty run behind
    res = run(["train", "policy=flow"])
    assert res.returncode == 2 and "robo-async bc policy=flow" in res.stderr


@pytest.mark.e2e
def test_async_inference_config_errors_are_one_clear_line():
    for args, want in (
        (["actor.inference=fast"], "actor.inference 'fast' unknown"),
        (["actor.replan=sometimes"], "actor.replan must be auto, due, end or continuous"),
        (["actor.inference_workers=0"], "actor.inference_workers must be at least 1"),
        (["policy.inference_delay_ms=[300,100]"], "policy.inference_delay_ms must be"),
    ):
        res = run(["train", *args])
        assert res.returncode == 2 and want in res.stderr, res.stderr
