"""The frozen-representation path end to end: DSRL on a pixel BC prior stores each frame's
embedding (made by the actor, or on import) tagged with the prior encoder's version, trains on
embeddings, and a run whose encoder differs from the stored embeddings is refused at start."""

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from robo_async.buffer.embeddings import EmbeddingMismatch
from robo_async.buffer.lmdb_store import PersistentReplayStore
from robo_async.config import UserError
from robo_async.learner.metrics import read_metrics

EXE = [sys.executable, "-m", "robo_async.cli"]
PIX = [
    "task=pick_lift",
    "task.cameras=[front]",
    "task.image_size=16",
    "policy=flow",
    "policy.obs_keys=[state]",
    "policy.cameras=[front]",
    "policy.image_size=16",
    "policy.horizon=4",
    "policy.hidden=[32,32]",
]


def cli(*args: str) -> str:
    res = subprocess.run(EXE + list(args), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def train_args(tmp: Path, prior: str, run: str) -> list[str]:
    return [
        *PIX,
        f"policy.path={tmp / prior}",
        "algo=dsrl",
        "algo.warmup_steps=40",
        "algo.batch_size=16",
        "algo.critic_hidden=[32]",
        f"buffer.imports=[{{path: {tmp / 'demos'}, table: demos}}]",
        f"run_dir={tmp / run}",
        "task.episode_ticks=20",
        "stop_at_success=null",
        "eval_episodes=0",
    ]


@pytest.mark.e2e
def test_embeddings_are_stored_once_with_their_version_and_another_encoder_is_refused(tmp_path):
    from robo_async.commands.train import import_history, prepare, run_encoder
    from robo_async.learner.learner import Learner

    cli(
        "buffer", "demos", f"out={tmp_path / 'demos'}", "episodes=2", "task=pick_lift", "cameras=front", "image_size=16"
    )
    for name, seed in (("bc", 0), ("bc2", 1)):
        cli(
            "bc",
            *PIX,
            "task.cameras=[front]",
            "policy.bc.steps=20",
            "policy.bc.batch=16",
            f"policy.bc.from_store={tmp_path / 'demos'}",
            f"run_dir={tmp_path / name}",
            "eval_episodes=0",
            f"seed={seed}",
        )
    cli(
        "train",
        "launcher=serial",
        *train_args(tmp_path, "bc", "run"),
        "budget.env_steps=200",
        "budget.seconds=300",
        "learner.log_every_s=0.5",
    )

    cfg, plan = prepare(train_args(tmp_path, "bc", "other"))
    version = run_encoder(plan).version
    store = PersistentReplayStore(tmp_path / "run" / "replay").open(readonly=True)
    try:
        names = {c.name for c in store.schema.columns}
        assert {"obs/front", "obs/embedding", "obs/embedding_version"} <= names  # the frames are kept too
        # every row, online (the actor embedded it) and imported demonstrations, by the prior's encoder
        assert store.embedding_versions() == {version: store.counts["online"] + store.counts["demos"]}
        assert store.counts["online"] >= 200 and store.counts["demos"] > 0
    finally:
        store.close()
    assert f"embeddings: encoder {version:014x} " in cli("buffer", "inspect", str(tmp_path / "run"))
    last = read_metrics(tmp_path / "run")[-1]
    assert last["time/updates"] > 0
    assert last["buffer/embedded_rows"] == 0  # the actor embedded what it sent: the learner encoded nothing

    # a run whose prior has another encoder, on this store: refused at start, naming both versions
    cfg2, plan2 = prepare(train_args(tmp_path, "bc2", "other2"))
    other = run_encoder(plan2).version
    assert other != version
    with pytest.raises(UserError, match=f"{version:014x}.*{other:014x}"):
        import_history(cfg2, tmp_path / "run", plan2)
    learner = Learner(dataclasses.replace(plan2.learner, run_dir=str(tmp_path / "run")))
    with pytest.raises(EmbeddingMismatch, match=f"{version:014x}.*{other:014x}"):
        learner.open()
    # ... unless those rows are to be left out
    learner = Learner(
        dataclasses.replace(
            plan2.learner,
            run_dir=str(tmp_path / "run"),
            options=dataclasses.replace(plan2.learner.options, stale_embeddings="skip"),
        )
    )
    learner.open()
    learner.close()


@pytest.mark.e2e
def test_a_classifier_reward_run_relabels_its_imported_demonstrations(tmp_path):
    """reward_classifier=: the imported demonstrations carry the classifier's rewards and successes
    (on their next frames), not the simulator's, like every online tick of the run."""
    import numpy as np

    from policies.reward import SuccessClassifier

    cli(
        "buffer", "demos", f"out={tmp_path / 'demos'}", "episodes=3", "task=pick_lift", "cameras=front", "image_size=16"
    )
    src = PersistentReplayStore(tmp_path / "demos").open(readonly=True)
    sim_rewards = np.array([row["reward"] for t in ("demos",) for _, _, _, row in src.records(t)])
    src.close()
    cli(
        "reward",
        "train",
        f"from={tmp_path / 'demos'}",
        "cameras=[front]",
        "image_size=16",
        "updates=20",
        f"out={tmp_path / 'clf'}",
        "holdout=0.34",
    )
    cli(
        "train",
        "launcher=serial",
        "task=pick_lift",
        "task.cameras=[front]",
        "task.image_size=16",
        "policy=mlp",
        "policy.obs_keys=[state]",
        "policy.hidden=[16,16]",
        "algo=sac",
        "algo.warmup_steps=20",
        "algo.batch_size=8",
        f"buffer.imports=[{{path: {tmp_path / 'demos'}, table: demos}}]",
        f"reward_classifier={tmp_path / 'clf'}",
        f"run_dir={tmp_path / 'run'}",
        "task.episode_ticks=10",
        "budget.env_steps=30",
        "budget.seconds=120",
        "stop_at_success=null",
        "eval_episodes=0",
    )
    clf = SuccessClassifier.load(tmp_path / "clf")
    store = PersistentReplayStore(tmp_path / "run" / "replay").open(readonly=True)
    rows = [row for _, _, _, row in store.records("demos")]
    store.close()
    assert len(rows) == len(sim_rewards) > 0
    p = clf.probability({"front": np.stack([r["next_obs/front"] for r in rows])})
    want = (p >= clf.meta.threshold).astype(np.float32)
    got = np.array([r["reward"] for r in rows])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal([bool(r["success"]) for r in rows], want.astype(bool))
    assert not np.array_equal(got, sim_rewards)  # the simulator's rewards are gone


@pytest.mark.e2e
def test_demos_for_a_success_classifier_hold_the_goal_or_miss_it(tmp_path):
    """`buffer demos hold=true`: on to episode_ticks with the goal held (many success frames);
    `miss=true`: the scripted near miss, every episode a failure; bad values are one line."""
    import numpy as np

    def rows(name: str) -> list[dict]:
        s = PersistentReplayStore(tmp_path / name).open(readonly=True)
        try:
            return [r for _, _, _, r in s.records("demos")]
        finally:
            s.close()

    base = ["buffer", "demos", "episodes=2", "task=pick_lift", "max_step=0.05"]
    cli(*base, f"out={tmp_path / 'ends'}")
    cli(*base, f"out={tmp_path / 'held'}", "hold=true")
    cli(*base, f"out={tmp_path / 'miss'}", "miss=true")
    ends, held, miss = rows("ends"), rows("held"), rows("miss")
    assert sum(r["success"] for r in ends) == 2  # each episode ends at its first success frame
    assert len(held) == 200 and sum(r["success"] for r in held) > 40  # ... or holds it to episode_ticks
    assert len(miss) == 200 and not any(r["success"] for r in miss)
    assert max(float(r["obs/ee_pos"][2]) for r in miss) > 0.06  # it lifted, empty
    res = subprocess.run(EXE + [*base, f"out={tmp_path / 'x'}", "miss=maybe"], capture_output=True, text=True)
    assert res.returncode != 0 and "miss=" in (res.stdout + res.stderr) and "Traceback" not in res.stderr
    assert np.isfinite([float(r["reward"]) for r in held]).all()


def test_a_bad_stale_embeddings_or_precision_choice_is_one_line_at_plan_time(tmp_path):
    from robo_async.commands.train import prepare

    for key, bad in (("learner.stale_embeddings", "maybe"), ("learner.precision", "fp16")):
        with pytest.raises(UserError, match=key) as e:
            prepare([f"{key}={bad}", f"run_dir={tmp_path / key}"])
        assert "\n" not in str(e.value)
