"""Learner data parallelism end to end: `learner.replicas=2` on the local launcher (real processes,
gloo on loopback, MuJoCo reach, SAC); a replica killed mid-run takes its group down, the supervisor
restarts the group from its checkpoint, and the run finishes with nothing acked lost."""

import os
import signal

from robo_async.learner import checkpoint
from robo_async.learner.metrics import read_metrics
from tests.launch.test_e2e import (_no_run_outlives_its_test, assert_contiguous, pids_of,  # noqa: F401
                                   start_training, wait_for, wait_for_env_steps)

STEPS = 2500


def test_a_killed_replica_restarts_the_learner_group_and_the_run_finishes_losing_nothing(tmp_path):
    from robo_async.launch.supervisor import read_events

    run_dir = tmp_path / "replicas"
    proc, pids = start_training(run_dir, "learner.replicas=2", f"budget.env_steps={STEPS}",
                                "learner.checkpoint_every_s=2", "launcher.supervise.backoff_s=1")
    assert set(pids) == {"learner", "learner rank 1", "actor 0"}, pids
    wait_for_env_steps(run_dir, 600)
    wait_for(lambda: checkpoint.list_checkpoints(run_dir / "checkpoints"), what="a checkpoint")
    os.kill(pids["learner rank 1"], signal.SIGKILL)
    wait_for(lambda: [e for e in read_events(run_dir) if e["event"] == "ready"], what="the learner group back")
    events = read_events(run_dir)
    assert [(e["event"], e["who"]) for e in events[:3]] == [("failed", "learner"), ("restarted", "learner"),
                                                             ("ready", "learner")], events
    failed = events[0]
    assert failed["rank"] == 1 and failed["rank_pid"] == pids["learner rank 1"], failed
    assert failed["why"] == f"learner rank 1 (pid {pids['learner rank 1']}): exit code -9 (SIGKILL)", failed
    now = pids_of(run_dir)
    assert now["learner"] != pids["learner"] and now["learner rank 1"] != pids["learner rank 1"]  # the whole group
    assert now["actor 0"] == pids["actor 0"]  # the actor was never restarted
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 0, err[-3000:]
    assert f"env-step budget of {STEPS} reached" in out, out[-2000:]
    for pid in (pids["learner"], now["learner"], now["learner rank 1"]):  # no rank outlived the run
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z", pid
    rows = read_metrics(run_dir)
    assert rows[-1]["supervisor/learner_restarts"] == 1
    assert rows[-1]["time/updates"] > max(r["time/updates"] for r in rows if r["supervisor/learner_restarts"] == 0)
    assert assert_contiguous(run_dir, 0) >= STEPS  # each acked row once: nothing lost or doubled
