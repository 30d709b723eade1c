"""The fleet: one lease authority per Ray cluster, jobs served first come first served."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from robo_async.launch.fleet import LeaseAuthority

EXE = [sys.executable, "-m", "robo_async.cli"]


def test_jobs_wait_in_line_in_arrival_order_and_leases_are_all_or_nothing():
    a = LeaseAuthority()
    assert a.acquire(["robot:x"], "A")["granted"]
    got = a.acquire(["robot:x"], "B")
    assert not got["granted"] and got["blocked"] == {"robot:x": ("A", 1)}
    assert a.acquire(["robot:x"], "C")["blocked"] == {"robot:x": ("A", 2)}
    assert a.table()["robot:x"] == {"holder": "A", "since": a.holders["robot:x"]["since"], "waiting": ["B", "C"]}
    a.release(["robot:x"], "A")
    assert not a.acquire(["robot:x"], "C")["granted"]  # C asks first, but B came first
    assert a.acquire(["robot:x"], "B")["granted"]
    # all or nothing: D wants y and x; x is held by B, so D holds neither
    got = a.acquire(["robot:y", "robot:x"], "D")
    assert not got["granted"] and "robot:y" not in a.holders
    assert a.acquire(["robot:y"], "E")["granted"] is False  # D is first in y's line
    # a holder that stops renewing (its machine died) loses the lease after ttl; so does a silent waiter
    a.holders["robot:x"]["seen"] -= 100
    for w in a.queues["robot:x"]:
        if w["job"] == "C":
            w["seen"] -= 100
    assert a.renew(["robot:x"], "B") == []  # (renewing refreshes: B keeps it)
    a.holders["robot:x"]["seen"] -= 100
    assert a.acquire(["robot:x", "robot:y"], "D", ttl_s=30)["granted"]  # B expired, C left the line
    assert a.renew(["robot:x"], "B") == ["robot:x"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def ray_cluster():
    """A Ray cluster started as users start one (`ray start --head`, token authentication on, the
    robot declared by the node it is plugged into); the jobs join it through launcher.address."""
    port = _free_port()
    env_bin = str(Path(sys.executable).parent)
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths live under it
    start = [
        f"{env_bin}/ray",
        "start",
        "--head",
        f"--port={port}",
        "--num-cpus=4",
        "--disable-usage-stats",
        "--include-dashboard=false",
        f"--temp-dir={temp}",
        '--resources={"robot:sim_so101/shared": 1}',
    ]
    res = subprocess.run(start, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-2000:]
    yield f"127.0.0.1:{port}"
    # only this cluster's processes: `ray stop` would stop every Ray process on the machine, and
    # tests beside this one (pytest-xdist) run local Ray clusters of their own
    _kill_processes_mentioning(temp)
    shutil.rmtree(temp, ignore_errors=True)


def _kill_processes_mentioning(text: str, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace_s`, every process whose command line contains `text`
    (a Ray cluster's processes all name its --temp-dir in theirs)."""

    def matching() -> list[int]:
        pids = []
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and int(d.name) != os.getpid():
                try:
                    if text.encode() in (d / "cmdline").read_bytes():
                        pids.append(int(d.name))
                except OSError:
                    pass
        return pids

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in matching():
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while matching() and time.monotonic() < deadline:
            time.sleep(0.2)


@pytest.mark.timeout(900)  # several faults in one run: phases add up on a slow machine
@pytest.mark.e2e
def test_two_jobs_on_a_ray_cluster_asking_for_the_same_robot_take_turns(tmp_path, ray_cluster):
    from robo_async.learner.metrics import read_metrics

    common = [
        "launcher=ray",
        f"launcher.address={ray_cluster}",
        "robots=[{type: sim_so101, id: shared}]",
        "resources.wait_s=600",
        "budget.env_steps=1500",
        "algo.warmup_steps=200",
        "algo.batch_size=32",
        "policy.hidden=[32,32]",
        "algo.hidden=[32,32]",
        "stop_at_success=null",
        "eval_episodes=0",
        "learner.log_every_s=0.2",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    # the first job trains until it is stopped, so it holds the robot for as long as the test needs
    # (a short budget could end before the second job even asks: the race this test must not rely on)
    log1, log2 = open(tmp_path / "first.log", "w+"), open(tmp_path / "second.log", "w+")
    first = subprocess.Popen(
        EXE + ["train", f"run_dir={tmp_path / 'first'}", *common, "budget.env_steps=100000000"],
        stdout=log1,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 240
    while not (tmp_path / "first" / "processes.json").exists() and time.monotonic() < deadline:
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        time.sleep(0.2)
    second = subprocess.Popen(
        EXE + ["train", f"run_dir={tmp_path / 'second'}", *common],
        stdout=log2,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    waiting = "waiting in line: robot:sim_so101/shared held by job 'first' (this job is number 1 in line)"
    deadline = time.monotonic() + 240
    while waiting not in " ".join((tmp_path / "second.log").read_text().split()):
        assert second.poll() is None and first.poll() is None and time.monotonic() < deadline, (
            tmp_path / "first.log"
        ).read_text()[-2000:] + (tmp_path / "second.log").read_text()[-2000:]
        time.sleep(0.2)
    assert not (tmp_path / "second" / "processes.json").exists()  # waiting: none of its processes started
    first.send_signal(signal.SIGINT)  # Ctrl-C: the first job checkpoints, stops and releases the robot
    first.wait(timeout=300)
    second.wait(timeout=300)
    out1, out2 = ((tmp_path / n).read_text() for n in ("first.log", "second.log"))
    assert first.returncode == 130, out1[-2000:]
    assert second.returncode == 0, out2[-2000:]
    # the second job got the robot only once the first had released it
    f1, f2 = (json.loads((tmp_path / n / "fleet.json").read_text()) for n in ("first", "second"))
    assert f2["granted"] >= f1["released"] > f1["granted"] and f2["waited_s"] > 0
    assert read_metrics(tmp_path / "second")[-1]["time/env_steps"] >= 1500
    table = subprocess.run(
        EXE + ["resources", "fleet=true", f"address={ray_cluster}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert table.returncode == 0, table.stderr
    assert "fleet leases" in table.stdout and "no leases held, nobody waiting" in table.stdout
    # a robot no node of the cluster declares: refused at once, naming it (not an actor waiting forever)
    absent = subprocess.run(
        EXE + ["train", f"run_dir={tmp_path / 'absent'}", *common, "robots=[{type: sim_so101, id: elsewhere}]"],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert absent.returncode == 1
    assert "no node of the Ray cluster offers robot:sim_so101/elsewhere" in absent.stderr + absent.stdout
