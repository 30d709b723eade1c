"""Learner data parallelism (learner/replicas.py): two gloo ranks in real processes on loopback
learn what one process learns from the combined batches; the shard wire format refuses what it
cannot read."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
from pathlib import Path

import msgpack
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from robo_async.learner.algorithms import PolicySpec
from robo_async.learner.algorithms.bc.config import BCConfig
from robo_async.learner.algorithms.sac import SACConfig
from robo_async.learner.config import LearnerConfig
from robo_async.learner.options import LearnerOptions
from robo_async.learner.replicas import (
    Rendezvous,
    ReplicaGroup,
    build_learner_algorithm,
    join_primary,
    run_replica,
)
from robo_async.learner.shards import ShardError, decode_header, encode_header, layout_of, pack, unpack

B, K, WORLD = 16, 5, 2  # rows per rank, updates, ranks
LOW, HIGH = (-1.9, -1.7, -1.6, -1.6, -2.7, -0.2), (1.9, 1.7, 1.6, 1.6, 2.8, 1.7)
POLICY = PolicySpec(
    "mlp", ("state", "ee_to_target"), (6, 3), LOW, HIGH, hidden=(32, 32), obs_scale={"ee_to_target": 10.0}
)


def config(algo: str, seed: int = 0) -> LearnerConfig:
    algo_config = BCConfig(batch_size=B) if algo == "bc" else SACConfig(batch_size=B, hidden=(32, 32))
    return LearnerConfig("unused", "", "", POLICY, algo, algo_config, seed=seed, options=LearnerOptions(replicas=WORLD))


def batches(seed: int = 0) -> list[dict[str, np.ndarray]]:
    """K combined batches; the last has one row more than the ranks share (it is left out)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(K):
        n = WORLD * B + (i == K - 1)
        state = rng.uniform(-1, 1, (n, 6)).astype(np.float32)
        out.append(
            {
                "obs/state": state,
                "obs/ee_to_target": rng.normal(0, 0.05, (n, 3)).astype(np.float32),
                "next_obs/state": state + rng.normal(0, 0.05, (n, 6)).astype(np.float32),
                "next_obs/ee_to_target": rng.normal(0, 0.05, (n, 3)).astype(np.float32),
                "action": (state + rng.normal(0, 0.1, (n, 6))).astype(np.float32),
                "reward": rng.normal(size=n).astype(np.float32),
                "terminated": (rng.random(n) < 0.1).astype(np.float32),
                "policy_version": rng.integers(0, 5, n).astype(np.int64),
                "success": rng.random(n) < 0.5,
                "table": np.zeros(n, np.int8),
            }
        )
    return out


def earlier() -> list[dict[str, np.ndarray]]:
    """Updates rank 0 made alone before the ranks met (as a learner restored from a checkpoint)."""
    return [{k: v[: WORLD * B] for k, v in b.items()} for b in batches(seed=1)[:2]]


def params(algorithm) -> dict[str, torch.Tensor]:
    return {
        f"{m}/{k}": v.detach().clone().contiguous()
        for m, mod in algorithm.modules().items()
        for k, v in mod.state_dict().items()
    }


def _rank(rank: int, ports: dict[str, int], out: str) -> None:
    """One rank, in its own process: for each algorithm, join, learn K updates, write its weights."""
    torch.set_num_threads(1)
    _gradients(Rendezvous("127.0.0.1", ports.pop("grads"), rank, WORLD, rank), out)
    for algo, port in ports.items():
        rdv = Rendezvous("127.0.0.1", port, rank, WORLD, rank)
        # rank 1 builds with another seed: only the start broadcast makes the ranks equal
        cfg = config(algo, seed=rank)
        if rank == 0:
            os.environ.update(rdv.env())
            algorithm = build_learner_algorithm(cfg)
            for b in earlier():  # as a resumed learner has: trained weights and optimiser state (Adam's moments)
                algorithm.update(b)
            group = join_primary(cfg, algorithm)
            assert group is not None
            for b in batches():
                shard = group.send(b)
                assert shard is not None and len(shard["action"]) == B
                algorithm.update(shard)
            group.stop()
            group.close()
        else:
            algorithm = run_replica(cfg, rdv)
        save_file(params(algorithm), str(Path(out) / f"{algo}-rank{rank}.safetensors"))


def _gradients(rdv: Rendezvous, out: str) -> None:
    """Averaging on its own: rank r's gradient is r + 1 (the mean is 1.5, not the sum 3: Adam would
    not tell them apart); then a parameter with a gradient on rank 0 only (ranks that diverged)."""
    group = ReplicaGroup(rdv).join()
    p, q = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([p, q], lr=1.0)
    p.grad = torch.full((3,), rdv.rank + 1.0)
    group.average(opt)
    said = ""
    q.grad = torch.ones(2) if rdv.rank == 0 else None
    try:
        group.average(opt)
    except RuntimeError as e:
        said = str(e)
    group.close()
    save_file({"grad": p.grad}, str(Path(out) / f"grads-rank{rdv.rank}.safetensors"), {"said": said})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("replicas")
    ctx = mp.get_context("spawn")
    ports = {"grads": free_port(), "bc": free_port(), "sac": free_port()}
    procs = [ctx.Process(target=_rank, args=(r, ports, str(out))) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    for p in procs:
        if p.is_alive():
            p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    return out


@pytest.mark.e2e
def test_two_gloo_ranks_learn_what_one_process_learns_from_the_combined_batches(trained: Path) -> None:
    """Rank 0 trained alone first (a resumed learner); rank 1 was built with another seed: the start
    gives it rank 0's weights and optimiser state, then each update averages the ranks' gradients."""
    torch.manual_seed(0)
    single = build_learner_algorithm(config("bc"))
    for b in earlier():
        single.update(b)
    start = params(single)
    for b in batches():
        single.update({k: v[: WORLD * B] for k, v in b.items()})  # the remainder row is left out by the ranks too
    want = params(single)
    ranks = [load_file(str(trained / f"bc-rank{r}.safetensors")) for r in range(WORLD)]
    assert ranks[0].keys() == want.keys()
    for k, v in want.items():
        assert not torch.equal(v, start[k]) or "log_std" in k, f"{k} did not learn"  # the test is not vacuous
        torch.testing.assert_close(ranks[0][k], v, rtol=1e-4, atol=1e-6, msg=f"{k}: rank 0 vs one process")
        assert torch.equal(ranks[1][k], ranks[0][k]), f"{k}: the ranks diverged"


def test_sac_ranks_stay_identical_with_their_own_noise(trained: Path) -> None:
    """SAC samples noise in its update (each rank its own), yet every optimiser steps on averaged
    gradients and the target networks follow: all ranks hold the same weights after K updates."""
    torch.manual_seed(0)
    start = params(build_learner_algorithm(config("sac")))
    ranks = [load_file(str(trained / f"sac-rank{r}.safetensors")) for r in range(WORLD)]
    assert ranks[0].keys() == start.keys() and {k.split("/")[0] for k in start} >= {"actor", "critic", "critic_target"}
    for k in start:
        assert torch.equal(ranks[1][k], ranks[0][k]), f"{k}: the ranks diverged"
    assert any(not torch.equal(ranks[0][k], start[k]) for k in start if k.startswith("critic_target/"))


def test_gradients_are_averaged_and_ranks_that_diverged_fail(trained: Path) -> None:
    from safetensors import safe_open

    for r in range(WORLD):
        with safe_open(str(trained / f"grads-rank{r}.safetensors"), "pt") as f:
            assert f.get_tensor("grad").tolist() == [1.5, 1.5, 1.5]
            assert (
                f.metadata()["said"] == "learner replicas diverged: only 1 of 2 ranks have a gradient for a "
                "parameter of this optimiser"
            )


def test_shards_deal_rows_round_robin_and_round_trip() -> None:
    b = batches()[-1]
    rows, layout = layout_of(b)
    assert rows == WORLD * B + 1
    for r in range(WORLD):
        payload = pack(b, layout, r, WORLD, B)
        got = unpack(payload, decode_header(encode_header(layout)), B)
        for k, v in b.items():
            np.testing.assert_array_equal(got[k], v[r : WORLD * B : WORLD])
            assert got[k].dtype == v.dtype


@pytest.mark.parametrize(
    "header, says",
    [
        (b"\xc1", "not msgpack"),
        (msgpack.packb([1, 2]), "a map with v=1"),
        (msgpack.packb({"v": 1, "arrays": [["obs/x", "object", [3]]]}), "'obs/x' has dtype 'object'"),
        (msgpack.packb({"v": 1, "arrays": [["obs/x", "float32", [-3]]]}), "'obs/x' has shape [-3]"),
        (msgpack.packb({"v": 1, "arrays": [["a", "float32", []], ["a", "int8", []]]}), "names an array twice"),
        (msgpack.packb({"v": 1, "arrays": [["a", "float32"]]}), "array 0 is not [key, dtype, shape]"),
    ],
)
def test_a_malformed_shard_header_is_refused_naming_what_is_wrong(header: bytes, says: str) -> None:
    with pytest.raises(ShardError) as e:
        decode_header(header)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_payload_of_the_wrong_size_is_refused() -> None:
    layout = [("action", "float32", (6,))]
    with pytest.raises(ShardError, match="payload is 100 bytes, its header says 192"):
        unpack(np.zeros(100, np.uint8), layout, 8)


def test_rendezvous_from_torchrun_variables_and_bad_ones_in_one_line() -> None:
    env = {"MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    rdv = Rendezvous.from_env(env)
    assert rdv == Rendezvous("10.0.0.2", 29500, 1, 2, 1) and rdv.env() == env
    with pytest.raises(ValueError, match="need the environment variable RANK"):
        Rendezvous.from_env({"MASTER_PORT": "1", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="RANK=2 WORLD_SIZE=2"):
        Rendezvous.from_env({**env, "RANK": "2"})
    with pytest.raises(ValueError, match="WORLD_SIZE='two' is not an integer"):
        Rendezvous.from_env({**env, "WORLD_SIZE": "two"})
