"""End to end with real processes, sockets and files: train, resume, eval, and the bad inputs."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from robo_async.learner import checkpoint
from robo_async.learner.metrics import read_metrics

EXE = [sys.executable, "-m", "robo_async.cli"]
TINY = [
    "algo.warmup_steps=200",
    "algo.batch_size=32",
    "policy.hidden=[32,32]",
    "algo.hidden=[32,32]",
    "learner.publish_every=5",
    "stop_at_success=null",
    "eval_episodes=2",
    "learner.log_every_s=0.2",
]


def run(args, timeout=180, **kw):
    return subprocess.run(EXE + args, capture_output=True, text=True, timeout=timeout, **kw)


# whole training runs as users start them (`robo-async train`), killed, hung, resumed: `make test-e2e`
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("runs") / "smoke"
    res = run(["train", f"run_dir={run_dir}", "budget.env_steps=1500", *TINY])
    assert res.returncode == 0, res.stderr + res.stdout
    return run_dir, res


def test_smoke_run_writes_everything_and_newer_weights_reach_the_actor(trained):
    run_dir, res = trained
    for name in ("config.yaml", "metrics.jsonl", "learning_curve.png", "processes.json"):
        assert (run_dir / name).exists(), name
    assert list((run_dir / "tb").iterdir())
    rows = read_metrics(run_dir)
    assert rows[-1]["time/env_steps"] >= 1500
    assert rows[-1]["time/updates"] > 100
    # Transitions produced by a policy version > 0 arrived: weights published after training
    # started crossed the socket, were swapped into the actor, and stamped its data.
    assert max(r["charts/actor_policy_version"] for r in rows) > 1
    assert "evaluation: success rate" in res.stdout
    assert f"results in {run_dir}" in res.stdout


def test_resume_restores_counters_and_weights(trained, tmp_path):
    run_dir, _ = trained
    before = checkpoint.resolve(run_dir)
    t0, m0 = checkpoint.read(before)
    meta0 = checkpoint.meta_of(m0)
    res = run(["train", f"resume={run_dir}", "budget.env_steps=2200"])
    assert res.returncode == 0, res.stderr + res.stdout
    after = checkpoint.resolve(run_dir)
    t1, m1 = checkpoint.read(after)
    meta1 = checkpoint.meta_of(m1)
    assert meta1["env_steps"] >= 2200 > meta0["env_steps"]
    assert meta1["updates"] > meta0["updates"] and meta1["version"] > meta0["version"]
    assert int(meta1["high_water"]["0"]) >= 2200  # actor 0 continued its seq numbering
    rows = read_metrics(run_dir)
    resumed = [r for r in rows if r["time/env_steps"] >= meta0["env_steps"]]
    assert resumed and min(r["time/updates"] for r in resumed) >= meta0["updates"]
    # the rate limiter carried on from its checkpointed state, counting every new transition
    assert meta1["limiter"]["inserted"] - meta0["limiter"]["inserted"] == meta1["env_steps"] - meta0["env_steps"]
    assert meta1["limiter"]["updates"] >= meta0["limiter"]["updates"]
    assert_contiguous(run_dir, 0)


_STARTED: list = []


@pytest.fixture(autouse=True)
def _no_run_outlives_its_test():
    yield
    while _STARTED:
        p = _STARTED.pop()
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=30)


def start_training(run_dir, *extra):
    """A long training run in the background; returns it once its processes are up, with their pids."""
    proc = subprocess.Popen(
        EXE
        + ["train", f"run_dir={run_dir}", "budget.seconds=800", *TINY, *extra],  # a backstop: these end by env steps
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _STARTED.append(proc)
    pids = run_dir / "processes.json"
    deadline = time.monotonic() + 300  # a hang guard: Ray and replicas start slowly on a loaded 2-core machine
    while not pids.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert pids.exists(), proc.communicate(timeout=30)
    return proc, json.loads(pids.read_text())


def wait_for_env_steps(run_dir, n, timeout=120):
    """Until the learner's metrics show at least n env steps (a deadline, not a guess)."""
    from robo_async.learner.metrics import read_metrics

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = read_metrics(run_dir)
        if rows and rows[-1].get("time/env_steps", 0) >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{run_dir}: fewer than {n} env steps after {timeout} s")


def actor_seqs(run_dir, actor):
    from robo_async.buffer.lmdb_store import PersistentReplayStore

    store = PersistentReplayStore(run_dir / "replay").open(readonly=True)
    seqs = [s for _, a, s, _ in store.records("online") if a == actor]
    store.close()
    return seqs


def assert_contiguous(run_dir, actor):
    """The store holds actor's transitions 0..n-1, each once: nothing lost, nothing doubled."""
    seqs = actor_seqs(run_dir, actor)
    assert sorted(seqs) == list(range(len(seqs))), "gaps or duplicates in the replay store"
    return len(seqs)


@pytest.mark.timeout(900)  # several faults in one run: phases add up on a slow machine
def test_learner_killed_past_its_restart_budget_stops_then_resume_loses_nothing(tmp_path):
    demos = tmp_path / "demos"
    res = run(["buffer", "demos", f"out={demos}", "episodes=5"])
    assert res.returncode == 0 and "recorded" in res.stdout, res.stderr
    run_dir = tmp_path / "killed"
    proc, pids = start_training(
        run_dir, f"buffer.imports=[{{path: {demos}, table: demos}}]", "launcher.supervise.restarts=0"
    )
    wait_for_env_steps(run_dir, 300)
    os.kill(pids["learner"], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert (
        "the learner failed 1 times within 3600 s (restart budget launcher.supervise.restarts=0); "
        "last: exit code -9 (SIGKILL)" in err
    )
    assert "imported" in out
    before = len(actor_seqs(run_dir, 0))
    assert before > 0
    res = run(["train", f"resume={run_dir}", f"budget.env_steps={before + 1000}", *TINY])
    assert res.returncode == 0, res.stderr + res.stdout
    assert "imported 0 transitions" in res.stdout  # the demos were already there
    assert assert_contiguous(run_dir, 0) >= before + 1000
    inspect = run(["buffer", "inspect", str(run_dir)])
    assert inspect.returncode == 0
    demos_line = [ln for ln in inspect.stdout.splitlines() if ln.startswith("demos")][0]
    assert int(demos_line.split()[1].replace(",", "")) > 0


def wait_for(pred, timeout=120, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


# The fault tests, shared by the local and the Ray runner (one supervisor, two back ends). Each
# makes its fault happen on a running job and waits for the supervisor's answer. Outages are made
# longer than the actor's learner_silent_s by the restart backoff, never by the machine's speed.
HEAL = [
    "task.realtime=true",
    "actor.learner_silent_s=1",
    "launcher.supervise.backoff_s=3",
    "learner.checkpoint_every_s=2",
]  # the learner is away >= 3 s (its backoff) > learner_silent_s
RAY = ["launcher=ray", "launcher.num_cpus=2"]


def pids_of(run_dir):
    return json.loads((run_dir / "processes.json").read_text())


def learner_killed_comes_back(run_dir, local):
    """kill -9 the learner: a new learner process, started by the supervisor after its backoff,
    reports again from its checkpoint; the real-time actor kept running (and counted the outage)."""
    from robo_async.launch.restarts import read_events

    wait_for(lambda: checkpoint.list_checkpoints(run_dir / "checkpoints"), what="a checkpoint")
    before = pids_of(run_dir)
    seen = len(read_events(run_dir))
    os.kill(before["learner"], signal.SIGKILL)
    ready = wait_for(lambda: [e for e in read_events(run_dir)[seen:] if e["event"] == "ready"], what="the learner back")
    events = read_events(run_dir)[seen:]
    assert [(e["event"], e["who"]) for e in events[:3]] == [
        ("failed", "learner"),
        ("restarted", "learner"),
        ("ready", "learner"),
    ], events
    assert events[0]["pid"] == before["learner"]
    if local:
        assert "SIGKILL" in events[0]["why"], events[0]
    new_pid = pids_of(run_dir)["learner"]
    assert new_pid != before["learner"] and ready[0]["pid"] == new_pid
    steps_back = read_metrics(run_dir)[-1]["time/env_steps"]
    wait_for(lambda: read_metrics(run_dir)[-1]["time/env_steps"] > steps_back + 100, what="training to go on")
    # the actor ran its robot through the outage, which lasted longer than its learner_silent_s
    wait_for(
        lambda: read_metrics(run_dir)[-1].get("actors/ticks_learner_away", 0) > 0,
        what="the actor's report of ticks run while the learner was away",
    )
    assert pids_of(run_dir)["actor 0"] == before["actor 0"]  # the actor was never restarted
    assert read_metrics(run_dir)[-1]["supervisor/learner_restarts"] >= 1
    return steps_back


def actor_killed_comes_back(run_dir, sig):
    """kill -9 (or SIGSTOP: hung) actor 0: the supervisor starts a new one, which numbers on from
    its journal and feeds the learner. Returns (the old pid, env steps when the new one was up)."""
    from robo_async.launch.restarts import read_events

    wait_for_env_steps(run_dir, 100)
    old = pids_of(run_dir)["actor 0"]
    seen = len(read_events(run_dir))
    os.kill(old, sig)
    wait_for(lambda: pids_of(run_dir)["actor 0"] != old, timeout=120, what="a new actor process")
    steps = read_metrics(run_dir)[-1]["time/env_steps"]
    wait_for(lambda: read_metrics(run_dir)[-1]["time/env_steps"] > steps + 100, what="the new actor's data")
    events = [e for e in read_events(run_dir)[seen:] if e["who"] == "actor 0"]
    assert [e["event"] for e in events] == ["failed", "restarted"], events
    assert events[0]["pid"] == old  # (a Ray actor's new pid is known once it runs: processes.json has it)
    if sig == signal.SIGSTOP:
        assert events[0]["why"].startswith("hung: no heartbeat for "), events
    assert all(e["who"] == "actor 0" for e in read_events(run_dir)[seen:]), "the learner was blamed"
    return old, steps


def interrupt(proc):
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]  # interrupted (after its final checkpoint)
    return out + err


def test_learner_restore_loads_exact_weights(trained):
    from robo_async.learner.algorithms import PolicySpec
    from robo_async.learner.algorithms.sac import SACConfig
    from robo_async.learner.config import LearnerConfig
    from robo_async.learner.learner import Learner

    run_dir, _ = trained
    tensors, metadata = checkpoint.read(checkpoint.resolve(run_dir))
    meta = checkpoint.meta_of(metadata)
    policy = PolicySpec(
        "mlp",
        ("state", "ee_to_target"),
        (6, 3),
        (-1.92, -1.75, -1.69, -1.66, -2.74, -0.17),
        (1.92, 1.75, 1.69, 1.66, 2.84, 1.75),
        (32, 32),
        obs_scale={"ee_to_target": 10.0},
    )
    cfg = LearnerConfig(str(run_dir), "", "", policy, "sac", SACConfig(hidden=(32, 32)), resume=True)
    learner = Learner(cfg)
    learner.restore(checkpoint.resolve(run_dir))
    assert learner.updates == meta["updates"] and learner.version == meta["version"]
    for k, v in learner.algorithm.critic_target.state_dict().items():
        assert (v == tensors[f"critic_target/{k}"]).all()


def test_eval_prints_success_and_writes_mp4(trained, tmp_path):
    run_dir, _ = trained
    video = tmp_path / "ep.mp4"
    res = run(["eval", f"checkpoint={run_dir}", "episodes=2", f"video={video}"])
    assert res.returncode == 0, res.stderr
    assert "success rate" in res.stdout
    import cv2

    cap = cv2.VideoCapture(str(video))
    assert cap.isOpened() and int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) > 0


def _one_error_line(res):
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    return lines[0]


def test_unknown_config_key():
    assert "unknown config key 'foo'" in _one_error_line(run(["train", "foo=1"]))


def test_unknown_task_names_options():
    assert "unknown task 'nope'; available: fetch, gym, gym_hil, metaworld, pick_lift, push, reach" in _one_error_line(
        run(["train", "task=nope"])
    )


def test_unknown_algo_and_policy():
    assert "unknown algo 'ppo'" in _one_error_line(run(["train", "algo=ppo"]))
    assert "unknown policy 'vla'" in _one_error_line(run(["train", "policy=vla"]))


def test_checkpoint_from_another_task(trained, tmp_path):
    run_dir, _ = trained
    assert "trained on task 'reach', not 'push'" in _one_error_line(run(["eval", f"checkpoint={run_dir}", "task=push"]))
    # A checkpoint whose robot spec differs (e.g. trained with other features) is refused too.
    from safetensors.torch import load_file, save_file

    src = checkpoint.resolve(run_dir)
    tensors, metadata = checkpoint.read(src)
    meta = checkpoint.meta_of(metadata)
    meta["spec"]["features"] = [["cube_pos", 3]]
    metadata["meta"] = json.dumps(meta)
    other = tmp_path / "ckpt_000000001.safetensors"
    save_file(load_file(str(src)), str(other), metadata)
    assert "was trained for robot" in _one_error_line(run(["eval", f"checkpoint={other}"]))


def test_a_new_run_into_a_used_run_dir_is_refused_and_nothing_there_changes(trained):
    run_dir, _ = trained
    before = sorted((p.name, p.stat().st_mtime_ns) for p in (run_dir / "checkpoints").iterdir())
    res = run(["train", f"run_dir={run_dir}", "budget.env_steps=200", *TINY])
    assert res.returncode != 0
    assert f"{run_dir} already holds a run (checkpoints, replay/data.mdb); continue it with resume=" in _one_error_line(
        res
    )
    assert sorted((p.name, p.stat().st_mtime_ns) for p in (run_dir / "checkpoints").iterdir()) == before


def test_port_in_use_fails_fast_with_message(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        res = run(["train", f"run_dir={tmp_path / 'r'}", f"transport.data_port={port}", *TINY], timeout=90)
    finally:
        holder.close()
    assert res.returncode == 1
    assert f"tcp://127.0.0.1:{port} is already in use" in res.stderr


@pytest.mark.timeout(900)  # several faults in one run: phases add up on a slow machine
@pytest.mark.parametrize("runner", ["local", "ray"])
def test_a_killed_learner_a_killed_actor_and_a_hung_actor_each_come_back_by_themselves(tmp_path, runner):
    """One job per runner, three faults one after the other (a Ray start is the slow part):
    1. the learner killed (-9) comes back by itself from its checkpoint while the real-time actor
       keeps running (the outage made longer than learner_silent_s by the restart backoff);
    2. actor 0 killed (-9) is restarted and resends what it journaled;
    3. actor 0 frozen (SIGSTOP, as a deadlock or a stuck driver call would) stops reaching the
       learner; the supervisor kills it after liveness_s and starts it again."""
    from robo_async.launch.restarts import read_events

    local = runner == "local"
    run_dir = tmp_path / runner
    proc, pids = start_training(run_dir, *([] if local else RAY), *HEAL, "launcher.supervise.liveness_s=15")
    assert set(pids) == {"learner", "actor 0"}  # every runner records its processes' pids
    wait_for_env_steps(run_dir, 200)
    learner_killed_comes_back(run_dir, local)
    killed, _ = actor_killed_comes_back(run_dir, signal.SIGKILL)
    _, steps = actor_killed_comes_back(run_dir, signal.SIGSTOP)
    text = " ".join(interrupt(proc).split())  # the console may wrap lines
    assert "the learner is back" in text
    died = f"actor 0 (pid {killed}) died: " + ("exit code -9 (SIGKILL); restarting it" if local else "")
    assert died in text and "restarting it" in text
    assert [(e["event"], e["who"]) for e in read_events(run_dir)] == [
        ("failed", "learner"),
        ("restarted", "learner"),
        ("ready", "learner"),
        ("failed", "actor 0"),
        ("restarted", "actor 0"),
        ("failed", "actor 0"),
        ("restarted", "actor 0"),
    ]
    assert read_metrics(run_dir)[-1]["supervisor/learner_restarts"] == 1
    # nothing lost or doubled through all three: each new actor numbered on from its journal
    assert assert_contiguous(run_dir, 0) > steps + 100


def test_with_the_transport_in_a_child_process_a_killed_actor_loses_nothing(tmp_path):
    """`actor.uplink=process` under the local launcher: actor 0 killed (-9) mid-run leaves its
    transport process to journal what it was handed; the restarted actor's child waits for it,
    resends it and numbers on: every row 0..n-1 of actor 0 once in the store."""
    run_dir = tmp_path / "uplink-process"
    proc, _ = start_training(run_dir, "task.realtime=true", "actor.uplink=process", "learner.checkpoint_every_s=2")
    _, steps = actor_killed_comes_back(run_dir, signal.SIGKILL)
    interrupt(proc)
    assert assert_contiguous(run_dir, 0) > steps


def test_an_actor_crashing_past_its_restart_budget_stops_the_run_naming_it(tmp_path):
    run_dir = tmp_path / "crash0"
    proc, pids = start_training(run_dir, "launcher.supervise.restarts=0")
    wait_for_env_steps(run_dir, 1)
    os.kill(pids["actor 0"], signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert (
        "actor 0 failed 1 times within 3600 s (restart budget launcher.supervise.restarts=0); last: exit code -9" in err
    )
    # The learner still wrote a final checkpoint on the way down.
    assert checkpoint.list_checkpoints(run_dir / "checkpoints")


def test_learner_refuses_batches_that_do_not_fit_the_spec(tmp_path):
    import numpy as np

    from robo_async.learner.algorithms import PolicySpec
    from robo_async.learner.config import LearnerConfig
    from robo_async.learner.learner import Learner
    from robo_async.transport.wire import TransitionBatch

    cfg = LearnerConfig(
        str(tmp_path),
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:0",
        PolicySpec("mlp", ("state",), (6,), (-1.0,) * 6, (1.0,) * 6),
    )
    learner = Learner(cfg)
    good = {
        "obs/state": np.zeros((2, 6), np.float32),
        "next_obs/state": np.zeros((2, 6), np.float32),
        "action": np.zeros((2, 6), np.float32),
    }
    assert learner._check_batch(TransitionBatch(0, 0, good)) is None
    assert (
        learner._check_batch(TransitionBatch(0, 0, {**good, "action": np.zeros((2, 5), np.float32)}))
        == "'action' is float32(5,), this run expects float32(6,)"
    )
    assert (
        learner._check_batch(TransitionBatch(0, 0, {k: v for k, v in good.items() if k != "obs/state"}))
        == "'obs/state' is missing"
    )


@pytest.mark.timeout(900)  # three actors and a learner on two cores: slow when the machine is busy
def test_two_heterogeneous_actors_and_a_robot_unplugged_mid_run(tmp_path):
    """Actor 0 drives the MuJoCo arm directly, actor 1 the same arm through LeRobot's Robot API
    (sim_so101 via our adapter), actor 2 is unplugged after 400 ticks: it stops, the run goes on."""
    run_dir = tmp_path / "two"
    res = run(
        [
            "train",
            f"run_dir={run_dir}",
            "actors=3",
            "budget.env_steps=6000",
            *TINY,
            "robots=[{}, {type: sim_so101, id: e2e_arm}, {disconnect_after_ticks: 400}]",
        ],
        timeout=840,  # a hang guard (it took 180 s with benchmarks sharing the cores), not a speed assertion
    )
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    text = " ".join((res.stdout + res.stderr).split())  # the console may wrap lines
    assert "actor 2" in text and "robot lost" in text and "continuing with 2 actor(s)" in text
    assert "disconnected (injected fault after 400 ticks)" in text
    counts = {a: len(actor_seqs(run_dir, a)) for a in (0, 1, 2)}
    assert counts[0] > 0 and counts[1] > 0  # both arms fed the learner
    assert 0 < counts[2] <= 400  # the unplugged one stopped at its fault
    for a in (0, 1, 2):
        assert_contiguous(run_dir, a)


def test_a_held_robot_fails_fast_naming_the_holder(tmp_path):
    env = {**os.environ, "ROBO_ASYNC_LEASE_DIR": str(tmp_path / "leases")}
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from hal.leases import LeaseManager; "
                "l = LeaseManager(sys.argv[1]).acquire('robot:sim_so101/shared_arm', job='someone-else'); "
                "print('held', flush=True); time.sleep(600)"
            ),
            str(tmp_path / "leases"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    res = run(["train", f"run_dir={tmp_path / 'r'}", "robot=sim_so101", "robot.id=shared_arm", *TINY], env=env)
    holder.kill()
    holder.wait()
    assert res.returncode == 1
    assert f"robot:sim_so101/shared_arm is held by job 'someone-else' (pid {holder.pid}" in res.stderr


@pytest.mark.timeout(900)  # several faults in one run: phases add up on a slow machine
def test_two_actors_on_a_local_ray_survive_a_learner_killed_mid_run(tmp_path):
    from robo_async.launch.restarts import read_events

    run_dir = tmp_path / "ray"
    # a budget long enough for the LeRobot-backed actor to start (it imports LeRobot) under load
    proc = subprocess.Popen(
        EXE
        + [
            "train",
            f"run_dir={run_dir}",
            "launcher=ray",
            "launcher.num_cpus=2",
            "actors=2",
            "budget.env_steps=4000",
            *TINY,
            "robots=[{}, {type: sim_so101, id: ray_arm}]",
            "launcher.supervise.backoff_s=0.5",
            "learner.checkpoint_every_s=2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: (run_dir / "processes.json").exists(), timeout=180, what="the learner on Ray")
        wait_for_env_steps(run_dir, 1500, timeout=240)
        # the Ray launcher serves the live dashboard too: both actors, with their robots, are on it
        url = (run_dir / "dashboard.url").read_text()
        assert url.startswith("http://127.0.0.1:")
        wait_for(
            lambda: len(json.loads(urllib.request.urlopen(url + "state", timeout=10).read())["actors"]) == 2,
            timeout=60,
            what="both actors on the dashboard",
        )
        state = json.loads(urllib.request.urlopen(url + "state", timeout=10).read())
        assert state["actors"]["1"]["resource"] == "robot:sim_so101/ray_arm", state["actors"]
        assert state["progress"]["time/env_steps"] > 0  # the learner's progress, as it reports it
        killed = json.loads((run_dir / "processes.json").read_text())["learner"]
        os.kill(killed, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:] + out[-2000:]
    assert "training ended: env-step budget" in out
    events = [(e["event"], e["who"]) for e in read_events(run_dir)]
    assert events == [("failed", "learner"), ("restarted", "learner"), ("ready", "learner")], events
    assert json.loads((run_dir / "processes.json").read_text())["learner"] != killed
    for a in (0, 1):  # both actors (one placed by the robot's Ray custom resource) fed the learner
        assert assert_contiguous(run_dir, a) > 0
    assert checkpoint.list_checkpoints(run_dir / "checkpoints")
    assert read_metrics(run_dir)[-1]["supervisor/learner_restarts"] == 1


def test_any_gymnasium_env_trains_as_a_sim_resource(tmp_path):
    run_dir = tmp_path / "gym"
    res = run(
        [
            "train",
            f"run_dir={run_dir}",
            "task=gym",
            "task.env_id=Pendulum-v1",
            "policy.obs_keys=[state]",
            "policy.action_mode=absolute",
            "budget.env_steps=800",
            *TINY,
        ]
    )
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
    assert assert_contiguous(run_dir, 0) >= 800


def test_training_run_with_async_inference_reports_inference_latency(tmp_path):
    """A real-time training run whose actor runs the async inference engine (injected 40 ms):
    the engine's latency reaches the learner's metrics through the heartbeats."""
    run_dir = tmp_path / "async"
    res = run(
        [
            "train",
            f"run_dir={run_dir}",
            "budget.env_steps=240",
            "task.realtime=true",
            "actor.inference=async_forward",
            "policy.inference_delay_ms=40",
            "actor.heartbeat_s=0.2",
            *TINY,
        ]
    )
    assert res.returncode == 0, res.stderr + res.stdout
    rows = [r for r in read_metrics(run_dir) if "actors/infer_p50_ms" in r]
    assert rows and rows[-1]["actors/infer_p50_ms"] >= 40 and rows[-1]["actors/bad_chunks"] == 0


def _running(pid: int) -> bool:
    """The process exists and has not exited (an orphan that exited stays a zombie until whatever
    adopted it reaps it: in a container that may be never)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_children_stop_and_checkpoint_when_the_launcher_is_killed(tmp_path):
    run_dir = tmp_path / "orphan"
    proc, pids = start_training(run_dir)
    wait_for_env_steps(run_dir, 1)
    proc.kill()  # the launcher dies without telling anyone
    proc.wait(30)
    deadline = time.monotonic() + 60
    alive = dict(pids)
    while alive and time.monotonic() < deadline:
        for who, pid in list(alive.items()):
            if not _running(pid):
                del alive[who]
        time.sleep(0.2)
    for pid in alive.values():
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"still running after the launcher died: {alive}"
    assert checkpoint.list_checkpoints(run_dir / "checkpoints")  # the learner saved on its way out
