"""`robo-async serve` and `robo-async train actor.inference_server=...` as users run them: real
processes; the learner's weights reach the server, the actor's chunks come from it."""

import signal
import socket
import subprocess
import sys
import time

import pytest

from robo_async.learner.metrics import read_metrics

EXE = [sys.executable, "-m", "robo_async.cli"]
TINY = [
    "algo.warmup_steps=200",
    "algo.batch_size=32",
    "policy.hidden=[32,32]",
    "algo.hidden=[32,32]",
    "learner.publish_every=5",
    "stop_at_success=null",
    "eval_episodes=0",
    "learner.log_every_s=0.2",
    "dashboard.port=null",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.e2e
def test_training_with_the_policy_on_a_server(tmp_path):
    serve_port, weights_port = free_port(), free_port()
    server = subprocess.Popen(
        EXE
        + [
            "serve",
            "task=reach",
            f"serve.port={serve_port}",
            "policy.hidden=[32,32]",
            f"serve.weights=tcp://127.0.0.1:{weights_port}",
            "serve.summary_s=1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        run_dir = tmp_path / "remote"
        res = subprocess.run(
            EXE
            + [
                "train",
                f"run_dir={run_dir}",
                "task=reach",
                "task.realtime=true",
                "budget.env_steps=450",
                f"transport.weights_port={weights_port}",
                f"actor.inference_server=tcp://127.0.0.1:{serve_port}",
                *TINY,
            ],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-2000:]
        time.sleep(1.5)  # one more summary line
    finally:
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=30)
    assert server.returncode == 0, out
    rows = read_metrics(run_dir)
    assert rows[-1]["time/env_steps"] >= 450
    stopped = [line for line in out.splitlines() if line.startswith("policy server stopped")][0]
    stats = eval(stopped.split(": ", 1)[1])  # the server's own summary (a dict literal)
    # chunks served all along (a round trip per chunk: how many depends on the machine's load, not on the code)
    assert stats["chunks"] >= 100 and stats["weight_swaps"] >= 2 and stats["version"] > 0
    assert stats["malformed"] == 0 and stats["refused"] == 0
    # the actor's heartbeat figures: round trips to the server, latency measured in ticks
    assert any(r.get("actors/server_rtt_p95_ms", 0) > 0 for r in rows)
    assert rows[-1]["actors/server_bad_replies"] == 0 and "actors/latency_ticks" in rows[-1]


@pytest.mark.e2e
def test_inline_with_a_server_is_refused_by_name():
    res = subprocess.run(
        EXE + ["train", "actor.inference=inline", "actor.inference_server=tcp://127.0.0.1:5999"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode != 0 and "would wait on the network on the control thread" in res.stderr
    res = subprocess.run(
        EXE + ["train", "actor.inference_server=localhost:5999"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode != 0 and "must be a ZMQ address like tcp://host:5560" in res.stderr
