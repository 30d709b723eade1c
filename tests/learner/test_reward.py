"""The learned reward: a success classifier trained on rendered frames from a store (through
`robo-async reward train`), its saved weights loaded back, and actors scoring ticks with it."""

import subprocess
import sys

import numpy as np
import pytest
import torch

from hal.safety import SafeRobot
from policies.reward import META, WEIGHTS, ClassifierReward, RewardError, SuccessClassifier
from robo_async.actor.loop import ControlLoop
from robo_async.actor.loop_config import LoopConfig
from robo_async.commands.reward import train_classifier
from robo_async.launch.builders import TaskArgs
from robo_async.launch.experts import expert_policy, record_demos
from sim import PickLiftTask, SimRobot, TableConfig

EXE = [sys.executable, "-m", "robo_async.cli"]
TASK = {"cameras": ("front",), "image_size": 64, "episode_ticks": 90}


# every test here shares a classifier trained on rendered frames (a whole `robo-async reward train`)
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("reward")
    # expert episodes that go on after the lift: frames before it are failures, after it successes
    n, rate = record_demos(
        TaskArgs("pick_lift", dict(TASK)), root / "store", episodes=12, max_step=0.05, until_terminated=False
    )
    assert rate > 0.8
    res = subprocess.run(
        EXE + ["reward", "train", f"from={root / 'store'}", "cameras=[front]", "updates=300", f"out={root / 'clf'}"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    return root, res


def test_the_classifier_separates_success_from_failure_frames_on_held_out_episodes(trained):
    root, res = trained
    clf = SuccessClassifier.load(root / "clf")
    m = clf.meta
    assert m.heldout_positives > 20 and m.heldout_frames > m.heldout_positives  # episodes held out, both kinds
    assert m.precision >= 0.85 and m.recall >= 0.7, m
    assert "held out" in res.stdout and "precision" in res.stdout


def test_saved_weights_load_back_exactly_and_serve_as_a_warm_start(trained, tmp_path):
    root, _ = trained
    clf = SuccessClassifier.load(root / "clf")
    frames = np.random.default_rng(0).integers(0, 255, (3, 64, 64, 3), dtype=np.uint8)
    again = SuccessClassifier.load(clf.save(tmp_path / "copy"))
    np.testing.assert_array_equal(clf.probability({"front": frames}), again.probability({"front": frames}))
    # init= starts from these weights: a few updates stay close to them; from scratch they do not
    labels = np.array([True, False, False])
    warm = train_classifier(
        frames[:, None], labels, np.array([0, 0, 1]), ("front",), 64, updates=5, holdout=0.0, init=clf
    )
    cold = train_classifier(frames[:, None], labels, np.array([0, 0, 1]), ("front",), 64, updates=5, holdout=0.0)
    w0 = clf.net.state_dict()["head.2.weight"]
    assert (warm.net.state_dict()["head.2.weight"] - w0).abs().max() < (
        cold.net.state_dict()["head.2.weight"] - w0
    ).abs().max()
    with pytest.raises(RewardError, match=r"init classifier is for cameras \['front'\] at 64 px, not \['wrist'\]"):
        train_classifier(frames[:, None], labels, np.array([0, 0, 1]), ("wrist",), 64, updates=5, holdout=0.0, init=clf)


def test_broken_or_mismatched_weights_are_refused_naming_the_file(tmp_path, trained):
    root, _ = trained
    bad = tmp_path / "bad"
    SuccessClassifier.load(root / "clf").save(bad)
    from safetensors.torch import save_file

    save_file({"head.2.weight": torch.zeros(3, 3)}, str(bad / WEIGHTS))
    with pytest.raises(RewardError, match="reward_classifier.safetensors does not fit"):
        SuccessClassifier.load(bad)
    (bad / META).unlink()
    with pytest.raises(RewardError, match="holds no reward classifier"):
        SuccessClassifier.load(bad)


def test_an_actor_scores_its_ticks_with_the_classifier(trained):
    root, _ = trained
    clf = SuccessClassifier.load(root / "clf")
    inner = SimRobot(PickLiftTask(TableConfig(cameras=("front",), image_size=64, episode_ticks=90)))
    robot = SafeRobot(ClassifierReward(inner, clf))
    robot.connect()
    rewards, truth = [], []

    def on_tick(info):
        rewards.append(robot.outcome().reward)  # the classifier's, on the frame just returned
        truth.append(inner.outcome().success)

    loop = ControlLoop(
        robot,
        expert_policy(TaskArgs("pick_lift", dict(TASK)), robot, 0.05),
        LoopConfig(episode_ticks=90, max_episodes=2, eval_every=1, inference="inline", seed=7),
        observer=on_tick,
    )
    result = loop.run()
    robot.close()
    assert set(rewards) <= {0.0, 1.0}
    # the classifier ended the episodes (terminated on its success), around the task's own success
    assert all(e.success for e in result.episodes) and all(e.length < 90 for e in result.episodes)
    assert np.mean(np.array(rewards) == np.array(truth, float)) > 0.8
