"""Every policy the actor can run passes the same conformance suite, and the suite catches faults."""

import numpy as np
import pytest

from policies.conformance import ConformanceError, check_policy
from policies.delayed import DelayedPolicy
from policies.flow import FlowChunkPolicy
from policies.mlp import MLPPolicy
from policies.scripted import ScriptedPolicy
from sim import ReachTask

SPEC = ReachTask().spec()
OBS = {
    "state": np.linspace(-0.3, 0.3, 6).astype(np.float32),
    "target": np.array([0.2, 0.0, 0.15], np.float32),
    "ee_to_target": np.array([0.05, -0.02, 0.01], np.float32),
}


def mlp():
    return MLPPolicy(("state", "ee_to_target"), (6, 3), SPEC.joint_low, SPEC.joint_high, hidden=(16, 16))


def flow():
    return FlowChunkPolicy(
        ("state", "target"), (6, 3), SPEC.joint_low, SPEC.joint_high, horizon=4, steps=2, hidden=(16,)
    )


@pytest.mark.parametrize(
    "make",
    [mlp, flow, lambda: DelayedPolicy(flow(), 1.0), lambda: ScriptedPolicy(lambda: OBS["state"], 1 / 30)],
    ids=["mlp", "flow", "delayed-flow", "scripted"],
)
def test_policies_conform(make):
    check_policy(make, OBS, action_dim=6)


def test_lerobot_act_conforms():
    from tests.policies.test_lerobot_chunk import act

    check_policy(lambda: act(cameras=(), chunk=4), OBS, action_dim=6)


def test_suite_catches_a_policy_that_ignores_deterministic():
    class Noisy(MLPPolicy):
        def predict_chunk(self, obs, **kw):
            self.deterministic = False  # ignores what the loop asked for
            return super().predict_chunk(obs, **kw)

    with pytest.raises(ConformanceError, match="deterministic"):
        check_policy(lambda: Noisy(("state",), (6,), SPEC.joint_low, SPEC.joint_high, hidden=(16,)), OBS, 6)


def test_suite_catches_a_wrong_chunk_length():
    class Short(ScriptedPolicy):
        horizon = 3  # declares 3 actions per chunk, returns 1

    with pytest.raises(ConformanceError, match="expected \\(3, 6\\)"):
        check_policy(lambda: Short(lambda: OBS["state"], 1 / 30), OBS, 6)


def test_suite_catches_a_policy_that_loads_mismatched_weights():
    class Careless(MLPPolicy):
        def load_weights(self, version, arrays):
            self.version = version  # accepts anything

    with pytest.raises(ConformanceError, match="WeightsMismatch"):
        check_policy(lambda: Careless(("state",), (6,), SPEC.joint_low, SPEC.joint_high, hidden=(8,)), OBS, 6)
