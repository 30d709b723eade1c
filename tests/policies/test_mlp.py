import numpy as np
import pytest

from policies import MLPPolicy, WeightsMismatch, make_policy

LOW, HIGH = (-1.0,) * 6, (1.0,) * 6


def make(**kw):
    return MLPPolicy(("state", "target"), (6, 3), LOW, HIGH, hidden=(32, 32), **kw)


def obs():
    return {"state": np.zeros(6, np.float32), "target": np.ones(3, np.float32)}


@pytest.mark.parametrize("mode", ["delta", "absolute"])
def test_chunk_shape_and_limits(mode):
    p = make(action_mode=mode)
    chunk = p.predict_chunk(obs())
    assert chunk.actions.shape == (1, 6) and chunk.policy_version == -1
    assert np.all(chunk.actions >= -1) and np.all(chunk.actions <= 1)


def test_delta_mode_moves_at_most_delta_scale_from_state():
    p = make(action_mode="delta", delta_scale=0.1)
    for _ in range(20):
        a = p.predict_chunk(obs()).actions[0]
        assert np.all(np.abs(a) <= 0.1 + 1e-6)


def test_forwarded_state_is_used():
    p = make(action_mode="delta", delta_scale=0.1, deterministic=True)
    fwd = np.full(6, 0.5, np.float32)
    a = p.predict_chunk(obs(), forwarded_state=fwd).actions[0]
    assert np.all(np.abs(a - 0.5) <= 0.1 + 1e-6)


def test_normalize_inverts_to_robot():
    p = make(action_mode="delta", delta_scale=0.2)
    state = np.full(6, 0.1, np.float32)
    a = np.linspace(-0.9, 0.9, 6).astype(np.float32)
    np.testing.assert_allclose(p.to_normalized(p.to_robot(a, state), state), a, atol=1e-5)


def test_load_weights_sets_version_and_rejects_other_architecture():
    src, dst = make(), make()
    dst.load_weights(4, src.weights())
    assert dst.version == 4
    np.testing.assert_array_equal(dst.weights()["head.weight"], src.weights()["head.weight"])
    other = MLPPolicy(("state",), (6,), LOW, HIGH, hidden=(16,))
    before = dst.weights()
    with pytest.raises(WeightsMismatch):
        dst.load_weights(5, other.weights())
    assert dst.version == 4
    np.testing.assert_array_equal(dst.weights()["head.weight"], before["head.weight"])


def test_registry_names_unknown_policy():
    with pytest.raises(KeyError, match="unknown policy 'nope'"):
        make_policy("nope")
