"""Learner data parallelism end to end: `learner.replicas=2` on the local launcher (real processes,
gloo on loopback, MuJoCo reach, SAC); a replica killed mid-run takes its group down, the supervisor
restarts the group from its checkpoint, and the run finishes with nothing acked lost."""

import os
import signal

import pytest

from robo_async.learner import checkpoint
from robo_async.learner.metrics import read_metrics
from tests.launch.test_e2e import (
    _running,
    assert_contiguous,
    pids_of,
    run,
    start_training,
    wait_for,
    wait_for_env_steps,
)

STEPS = 2000


def group_comes_back(run_dir, seen):
    """The events since `seen`: the learner group failed, was restarted and is ready again."""
    from robo_async.launch.restarts import read_events

    wait_for(lambda: [e for e in read_events(run_dir)[seen:] if e["event"] == "ready"], what="the learner group back")
    events = read_events(run_dir)[seen:]
    assert [(e["event"], e["who"]) for e in events] == [
        ("failed", "learner"),
        ("restarted", "learner"),
        ("ready", "learner"),
    ], events
    return events[0]


@pytest.mark.timeout(900)  # several faults in one run: phases add up on a slow machine
@pytest.mark.e2e
def test_killed_or_hung_learner_ranks_restart_the_group_and_the_run_finishes_losing_nothing(tmp_path):
    """Three faults on one run (learner.replicas=2), each answered by restarting the whole group
    from its checkpoint on the same addresses while the actor keeps its process:
    1. the replica (rank 1) killed (-9): its peer sees it die; the event names rank 1;
    2. rank 0 frozen (SIGSTOP) and the replica killed: the frozen rank cannot end by itself, the
       group ends it (else it would hold the ports and the new group could not bind);
    3. the replica frozen: rank 0 waits on it, stops reporting, and is judged hung (liveness_s)."""
    from robo_async.launch.restarts import read_events

    run_dir = tmp_path / "replicas"
    proc, pids = start_training(
        run_dir,
        "learner.replicas=2",
        f"budget.env_steps={STEPS}",
        "learner.checkpoint_every_s=2",
        "launcher.supervise.backoff_s=1",
        "launcher.supervise.liveness_s=15",
    )
    assert set(pids) == {"learner", "learner rank 1", "actor 0"}, pids
    wait_for_env_steps(run_dir, 500)
    wait_for(lambda: checkpoint.list_checkpoints(run_dir / "checkpoints"), what="a checkpoint")
    os.kill(pids["learner rank 1"], signal.SIGKILL)
    failed = group_comes_back(run_dir, 0)
    assert failed["rank"] == 1 and failed["rank_pid"] == pids["learner rank 1"], failed
    # (rank 0 may have failed on its own by then, of its peer's death: said after it)
    assert failed["why"].startswith(f"learner rank 1 (pid {pids['learner rank 1']}): exit code -9 (SIGKILL)"), failed
    second = pids_of(run_dir)
    assert second["learner"] != pids["learner"] and second["learner rank 1"] != pids["learner rank 1"]

    wait_for_env_steps(run_dir, read_metrics(run_dir)[-1]["time/env_steps"] + 200)
    os.kill(second["learner"], signal.SIGSTOP)
    os.kill(second["learner rank 1"], signal.SIGKILL)
    failed = group_comes_back(run_dir, 3)
    assert (
        failed["rank"] == 1
        and failed["why"] == f"learner rank 1 (pid {second['learner rank 1']}): exit code -9 (SIGKILL)"
    ), failed  # (rank 0 was frozen: it had not failed)
    assert not _running(second["learner"])  # the frozen rank 0 was ended
    third = pids_of(run_dir)

    wait_for_env_steps(run_dir, read_metrics(run_dir)[-1]["time/env_steps"] + 200)
    os.kill(third["learner rank 1"], signal.SIGSTOP)
    failed = group_comes_back(run_dir, 6)
    assert failed["why"].startswith("no report for ") and failed["rank"] == 0, failed

    out, err = proc.communicate(timeout=400)  # a hang guard
    assert proc.returncode == 0, err[-3000:]
    assert f"env-step budget of {STEPS} reached" in out, out[-2000:]
    now = pids_of(run_dir)
    assert now["actor 0"] == pids["actor 0"]  # the actor was never restarted
    for pid in (*pids.values(), *second.values(), *third.values(), *now.values()):  # no rank outlived the run
        assert not _running(pid), pid
    assert len(read_events(run_dir)) == 9
    rows = read_metrics(run_dir)
    assert rows[-1]["supervisor/learner_restarts"] == 3
    assert rows[-1]["time/updates"] > max(r["time/updates"] for r in rows if r["supervisor/learner_restarts"] < 3)
    assert assert_contiguous(run_dir, 0) >= STEPS  # each acked row once: nothing lost or doubled

    # resumed (learner.replicas=2 from the run's config): both ranks start from the last checkpoint
    before = checkpoint.meta_of(checkpoint.read(checkpoint.resolve(run_dir))[1])
    res = run(["train", f"resume={run_dir}", f"budget.env_steps={STEPS + 300}"])
    assert res.returncode == 0, res.stderr[-3000:]
    after = checkpoint.meta_of(checkpoint.read(checkpoint.resolve(run_dir))[1])
    assert after["updates"] > before["updates"] and after["env_steps"] >= STEPS + 300
    assert set(pids_of(run_dir)) == {"learner", "learner rank 1", "actor 0"}
    assert assert_contiguous(run_dir, 0) >= STEPS + 300


@pytest.mark.timeout(900)  # several faults in one run: phases add up on a slow machine
@pytest.mark.e2e
def test_on_ray_the_replicas_are_ray_actors_and_a_killed_one_restarts_the_group(tmp_path):
    """launcher=ray with learner.replicas=2: rank 0 is the learner's Ray actor, rank 1 a Ray actor
    of its own joining it (a local Ray here; on a cluster it goes wherever there is room). The
    replica killed (-9): the group restarts from its checkpoint, the event names rank 1, and the
    run finishes with every acked row once."""
    from robo_async.launch.restarts import read_events

    run_dir = tmp_path / "ray-replicas"
    proc, pids = start_training(
        run_dir,
        "launcher=ray",
        "launcher.num_cpus=4",
        "learner.replicas=2",
        f"budget.env_steps={STEPS}",
        "learner.checkpoint_every_s=2",
        "launcher.supervise.backoff_s=1",
    )
    assert set(pids) == {"learner", "learner rank 1", "actor 0"}, pids
    assert pids["learner rank 1"] != pids["learner"]
    wait_for_env_steps(run_dir, 500)
    wait_for(lambda: checkpoint.list_checkpoints(run_dir / "checkpoints"), what="a checkpoint")
    os.kill(pids["learner rank 1"], signal.SIGKILL)
    failed = group_comes_back(run_dir, 0)
    assert failed["rank"] == 1 and failed["rank_pid"] == pids["learner rank 1"], failed
    assert failed["why"].startswith(f"learner rank 1 (pid {pids['learner rank 1']}): "), failed
    wait_for(lambda: pids_of(run_dir)["learner rank 1"] != pids["learner rank 1"], what="a new replica's pid")
    out, err = proc.communicate(timeout=600)  # a hang guard: Ray on a loaded 2-core machine took 430 s
    assert proc.returncode == 0, err[-3000:]
    assert f"env-step budget of {STEPS} reached" in out, out[-2000:]
    assert [e["event"] for e in read_events(run_dir)] == ["failed", "restarted", "ready"]
    rows = read_metrics(run_dir)
    assert rows[-1]["supervisor/learner_restarts"] == 1
    assert rows[-1]["time/updates"] > max(r["time/updates"] for r in rows if r["supervisor/learner_restarts"] < 1)
    assert assert_contiguous(run_dir, 0) >= STEPS
