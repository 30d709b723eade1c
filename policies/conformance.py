"""The conformance suite every `Policy` passes (beside `hal.conformance.check_robot`).

    check_policy(lambda: MLPPolicy(...), obs, action_dim=6)   # raises ConformanceError naming what is wrong

Checks: `architecture` is a non-empty string and `horizon` a positive int (the async runner plans
with them); `predict_chunk` returns an `ActionChunk` of `horizon` finite float actions of
`action_dim`, with and without a forwarded state; `deterministic=True` repeats itself;
`load_weights` of the policy's own weights takes the new version; weights with a missing or
misshaped parameter raise `WeightsMismatch` and keep the old version and parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from policies.base import ActionChunk, Policy, WeightsMismatch


class ConformanceError(AssertionError):
    """A `Policy` broke the interface's contract (what, in the message)."""

    pass


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise ConformanceError(what)


def check_policy(make: Callable[[], Policy], obs: Mapping[str, np.ndarray], action_dim: int) -> None:
    """Run the `Policy` conformance suite on a policy from `make()` for observation `obs` and
    `action_dim`: architecture and horizon declared; finite chunks of H x action_dim with a
    positive dt, with and without a forwarded state; weights loaded with their version, and a
    mismatched load refused leaving version and weights as they were. Raises ConformanceError
    naming the first broken rule."""
    policy = make()
    _check(isinstance(policy.architecture, str) and bool(policy.architecture), "architecture must be a non-empty str")
    _check(
        isinstance(policy.horizon, int) and policy.horizon >= 1, f"horizon must be an int >= 1, not {policy.horizon!r}"
    )
    for fstate in (None, np.asarray(obs["state"], np.float32)):
        chunk = policy.predict_chunk(obs, forwarded_state=fstate)
        _check(isinstance(chunk, ActionChunk), f"predict_chunk returned {type(chunk).__name__}, not ActionChunk")
        a = np.asarray(chunk.actions)
        _check(
            a.shape == (policy.horizon, action_dim),
            f"chunk actions {a.shape}, expected ({policy.horizon}, {action_dim})",
        )
        _check(bool(np.all(np.isfinite(a))), "chunk actions contain NaN/Inf")
        _check(chunk.dt > 0, f"chunk dt must be positive, got {chunk.dt}")
    policy.deterministic = True
    first = policy.predict_chunk(obs).actions
    _check(
        np.allclose(first, policy.predict_chunk(obs).actions, atol=1e-5),
        "deterministic=True must give the same chunk for the same observation",
    )
    weights = policy.weights()
    policy.load_weights(7, weights)
    _check(policy.version == 7, f"load_weights(7, ...) left version {policy.version}")
    if not weights:
        return  # nothing to mismatch (scripted controllers)
    name = next(iter(weights))
    for bad in (
        {k: v for k, v in weights.items() if k != name},
        {**weights, name: np.zeros((*np.shape(weights[name]), 2), np.float32)},
    ):
        try:
            policy.load_weights(8, bad)
            raise ConformanceError("load_weights with a missing or misshaped parameter must raise WeightsMismatch")
        except WeightsMismatch:
            pass
        _check(policy.version == 7, "a refused load_weights must keep the old version")
        _check(
            np.array_equal(policy.weights()[name], weights[name]), "a refused load_weights must keep the old weights"
        )
