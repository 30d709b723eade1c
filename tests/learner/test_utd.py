"""The update-to-data ratio a learner reached, beside its cap: what a real-time robot's learner
managed (the progress line, the dashboard, `metrics.jsonl`)."""

import time

import pytest

from robo_async.learner.algorithms import PolicySpec
from robo_async.learner.algorithms.sac import SACConfig
from robo_async.learner.config import LearnerConfig
from robo_async.learner.options import LearnerOptions
from robo_async.learner.reporting import utd


def test_utd_is_updates_per_env_step_and_zero_without_env_steps():
    assert utd(50.0, 10.0) == 5.0 and utd(3.0, 0.0) == 0.0


def test_the_learner_reports_the_utd_it_reached_and_its_cap(tmp_path):
    from robo_async.learner.learner import Learner

    cfg = LearnerConfig(
        str(tmp_path),
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:0",
        PolicySpec("mlp", ("state",), (6,), (-1.0,) * 6, (1.0,) * 6, hidden=(32, 32)),
        algo_config=SACConfig(batch_size=16, warmup_steps=32, hidden=(32, 32), utd_ratio=20.0),
        tensorboard=False,
        stop_at_success=None,
        options=LearnerOptions(checkpoint_every_s=3600.0),
    )
    learner = Learner(cfg)
    learner.open()
    try:
        learner.progress()  # the windows' first sample: 0 env steps, 0 updates
        time.sleep(0.01)
        learner.env_steps, learner.updates = 100, 250  # 2.5 updates per env step since
        p = learner.progress()
        assert p["time/utd_10s"] == pytest.approx(2.5) and p["time/utd_60s"] == pytest.approx(2.5)
        assert p["time/utd_cap"] == 20.0
    finally:
        learner.close()
