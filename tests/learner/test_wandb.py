"""Weights & Biases beside TensorBoard (robo_async/learner/metrics.py): in offline mode (no
network) a learner's metrics land in the W&B run file with the same namespaced keys and env-step
steps, and a resumed run logs into the same W&B run. The run file (a LevelDB-style log of
protobuf records) is read back here with W&B's own record class."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest


def _history(run_file: Path) -> list[dict]:
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, rows, part = run_file.read_bytes(), 7, [], b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 0:
            break
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            r = pb.Record()
            r.ParseFromString(part)
            if r.WhichOneof("record_type") == "history":
                rows.append({it.key or "/".join(it.nested_key): json.loads(it.value_json) for it in r.history.item})
    return rows


def test_metrics_go_to_wandb_offline_with_our_keys_and_a_resumed_run_continues_the_same_run(tmp_path, monkeypatch):
    from robo_async.learner.metrics import MetricsLogger, WandbOptions, read_metrics

    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "config.yaml").write_text("task: {name: reach}\nseed: 3\n")
    opts = WandbOptions(project="robo_async-test", mode="offline")
    m = MetricsLogger(tmp_path, tensorboard=False, wandb=opts)
    for step in (0, 100, 200):
        m.write(step, {"charts/success_rate": step / 200, "losses/critic": 1.0 - step / 400})
    m.close()
    m = MetricsLogger(tmp_path, tensorboard=False, wandb=opts)  # a restarted learner, the same run dir
    m.write(300, {"charts/success_rate": 1.0, "losses/critic": 0.2})
    m.close()
    runs = sorted((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 2 and len({p.stem for p in runs}) == 1  # one W&B run id, resumed
    rows = [r for p in runs for r in _history(p)]
    assert [r["_step"] for r in rows] == [0, 100, 200, 300]
    assert [r["charts/success_rate"] for r in rows] == [r["charts/success_rate"] for r in read_metrics(tmp_path)]
    assert {"charts/success_rate", "losses/critic"} <= set(rows[0])


def test_a_bad_mode_is_named():
    from robo_async.learner.metrics import WandbOptions, WandbSink

    with pytest.raises(ValueError, match="learner.wandb.mode"):
        WandbSink(Path("/tmp"), WandbOptions(project="p", mode="cloud"))


def test_the_learner_section_carries_wandb_to_the_learner(tmp_path):
    from robo_async.config import compose_config
    from robo_async.launch.builders import build_plan

    plan = build_plan(compose_config(["learner.wandb.project=arm", "learner.wandb.mode=offline"]), tmp_path / "run")
    assert (plan.learner.options.wandb.project, plan.learner.options.wandb.mode) == ("arm", "offline")
    assert build_plan(compose_config([]), tmp_path / "off").learner.options.wandb.project is None  # off by default


def test_a_bad_wandb_mode_or_a_missing_wandb_is_refused_at_plan_time(tmp_path, monkeypatch):
    import importlib.util

    from robo_async.config import UserError, compose_config
    from robo_async.launch.builders import build_plan
    from robo_async.launch.mirrors import ConfigError

    with pytest.raises(UserError, match="learner.wandb.mode"):  # refused when composing (WandbMode), before the plan
        build_plan(compose_config(["learner.wandb.project=arm", "learner.wandb.mode=cloud"]), tmp_path / "a")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match="wandb is not installed"):
        build_plan(compose_config(["learner.wandb.project=arm"]), tmp_path / "b")
