"""Filtered flow fine-tuning (`algo=filtered`): BC on successful episodes, demos and corrections."""

import numpy as np
import torch

from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.buffer.sampler import Sampler
from robo_async.learner.algorithms import PolicySpec, build_algorithm
from robo_async.learner.algorithms.filtered import FilteredConfig
from tests.buffer.test_windows import Episodes, fill


def test_filtered_learns_only_from_what_worked(tmp_path):
    store = PersistentReplayStore(tmp_path / "r", StoreConfig(commit_ms=5)).open()
    fill(store, Episodes())
    spec = PolicySpec(
        "flow",
        ("state",),
        (3,),
        (-1.0,) * 3,
        (20.0,) * 3,
        hidden=(32, 32),
        action_mode="absolute",
        options={"horizon": 3},
    )
    algo = build_algorithm("filtered", FilteredConfig(), spec)
    assert algo.window == 3 and algo.successful_only
    sampler = Sampler(store, 64, {"online": 1.0}, window=algo.window, successful_only=algo.successful_only)
    first = None
    for _ in range(150):
        b = sampler.sample_now()
        # only actor 0's episodes 0 and 1 succeeded (terminated with success)
        assert set(map(tuple, b["obs/state"][:, :2].astype(int).tolist())) <= {(0, 0), (0, 1)}
        m = algo.update(b)
        first = m["losses/flow_bc_loss"] if first is None else first
    assert m["losses/flow_bc_loss"] < first and m["losses/online_share"] == 1.0
    store.close()


def test_table_weights_scale_each_rows_loss():
    spec = PolicySpec(
        "flow", ("state",), (2,), (-1.0,) * 2, (1.0,) * 2, hidden=(16,), action_mode="absolute", options={"horizon": 2}
    )
    algo = build_algorithm("filtered", FilteredConfig(online_weight=0.0, demo_weight=1.0), spec)
    rng = np.random.default_rng(0)
    batch = {
        "obs/state": rng.normal(size=(8, 2)).astype(np.float32),
        "actions": rng.uniform(-1, 1, (8, 2, 2)).astype(np.float32),
        "steps": np.full(8, 2),
        "table": np.zeros(8, np.int8),
    }
    before = [p.detach().clone() for p in algo.policy.net.parameters()]
    algo.update(batch)  # every row online with weight 0: no gradient reaches the network
    assert all(torch.equal(a, p) for a, p in zip(before, algo.policy.net.parameters(), strict=False))
    batch["table"][:] = 1  # demos, weight 1: it learns
    algo.update(batch)
    assert not all(torch.equal(a, p) for a, p in zip(before, algo.policy.net.parameters(), strict=False))
