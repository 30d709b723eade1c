"""Stored embeddings of a frozen camera encoder (buffer/embeddings.py): made once per frame, tagged
with the encoder's version, counted per version by the store, never mixed across versions."""

import numpy as np
import pytest
import torch

from policies.embedding import FrozenEncoder, encoder_version, show_version
from policies.networks import ImageEncoder
from robo_async.buffer.codec import encode_frames
from robo_async.buffer.embeddings import EmbeddingMismatch, check_store_versions, embed_batch
from robo_async.buffer.lmdb_store import PersistentReplayStore, StoreConfig
from robo_async.buffer.sampler import Sampler
from robo_async.transport.wire import TransitionBatch, WireError, decode, encode

SIZE = 16


def encoder(seed: int = 0, cams=("front", "wrist")) -> FrozenEncoder:
    torch.manual_seed(seed)
    return FrozenEncoder(ImageEncoder(len(cams), SIZE, out=8), cams)


def episode(actor: int, seq: int, n: int, end: bool = True, cams=("front", "wrist"), seed: int = 0):
    """A compact batch as an actor's Adder makes it: obs/<k> per row, final_obs/<k> for the last next obs."""
    rng = np.random.default_rng(seed + seq)
    frames = {c: rng.integers(0, 256, (n + 1, SIZE, SIZE, 3), dtype=np.uint8) for c in cams}
    state = np.arange(n + 1, dtype=np.float32)[:, None].repeat(3, 1)
    arrays = {
        "obs/state": state[:n],
        "final_obs/state": state[n:],
        "action": np.zeros((n, 2), np.float32),
        "reward": np.zeros(n, np.float32),
        "terminated": np.eye(1, n, n - 1, dtype=bool)[0] & end,
        "truncated": np.zeros(n, bool),
        "policy_version": np.zeros(n, np.int64),
        "success": np.zeros(n, bool),
    }
    for c in cams:
        arrays[f"obs/{c}"], arrays[f"final_obs/{c}"] = frames[c][:n], frames[c][n:]
    return TransitionBatch(actor, seq, arrays), frames


def test_a_batch_is_embedded_once_per_frame_and_rows_of_another_version_are_re_encoded():
    enc = encoder()
    b, frames = episode(0, 0, 6)
    out, made = embed_batch(b, enc)
    assert made == 7  # six rows plus the final next observation: each frame once
    want = enc(np.stack([frames["front"], frames["wrist"]], 1))
    np.testing.assert_array_equal(out.arrays["obs/embedding"], want[:6])
    np.testing.assert_array_equal(out.arrays["final_obs/embedding"], want[6:])
    assert out.arrays["obs/embedding"].dtype == np.float16 and out.arrays["obs/embedding"].shape == (6, enc.dim)
    assert set(out.arrays["obs/embedding_version"]) == {enc.version}
    # what the current encoder made passes as it is
    again, made = embed_batch(out, enc)
    assert made == 0 and again is out
    # another encoder's rows are re-encoded, never kept beside the new version
    other = encoder(seed=1)
    assert other.version != enc.version
    redone, made = embed_batch(out, other)
    assert made == 7 and set(redone.arrays["obs/embedding_version"]) == {other.version}
    np.testing.assert_array_equal(
        redone.arrays["obs/embedding"], other(np.stack([frames["front"], frames["wrist"]], 1))[:6]
    )
    # a run without a frozen encoder stores no embeddings
    plain, _ = embed_batch(redone, None)
    assert not [k for k in plain.arrays if "embedding" in k]


def test_full_batches_with_encoded_frames_are_embedded_from_the_decoded_frames():
    """What the learner gets from an actor that did not embed (remote inference): next_obs
    columns beside obs, frames QOI-encoded; next_obs shares obs's embeddings shifted by a tick."""
    from robo_async.transport.wire import expand_next_obs

    enc = encoder()
    b, frames = episode(0, 0, 5)
    full = TransitionBatch(0, 0, encode_frames(expand_next_obs(b.arrays), "qoi", 95))
    out, made = embed_batch(full, enc)
    assert made == 6  # the next observations reuse the shifted obs embeddings: one new frame
    want = enc(np.stack([frames["front"], frames["wrist"]], 1))
    np.testing.assert_array_equal(out.arrays["obs/embedding"], want[:5])
    np.testing.assert_array_equal(out.arrays["next_obs/embedding"], want[1:])


def test_a_camera_the_encoder_needs_is_named_when_missing():
    b, _ = episode(0, 0, 3, cams=("front",))
    b.arrays["obs/wrist"] = b.arrays["obs/front"]  # obs has both, the final observation one
    with pytest.raises(ValueError, match="final_obs/wrist"):
        embed_batch(b, encoder())


def test_the_version_names_the_weights():
    a, b = ImageEncoder(1, SIZE, out=8), ImageEncoder(1, SIZE, out=8)
    b.load_state_dict(a.state_dict())
    assert encoder_version(a) == encoder_version(b)
    with torch.no_grad():
        b.conv[0].weight[0, 0, 0, 0] += 1e-3
    assert encoder_version(a) != encoder_version(b)
    assert len(show_version(encoder_version(a))) == 14


def test_embedding_columns_from_the_network_are_checked():
    enc = encoder()
    b, _ = embed_batch(episode(0, 0, 4)[0], enc)
    assert isinstance(decode(encode(b)), TransitionBatch)
    for k, bad in (
        ("obs/embedding_version", b.arrays["obs/embedding_version"].astype(np.float64)),
        ("obs/embedding_version", np.full(4, -3, np.int64)),
        ("obs/embedding", b.arrays["obs/embedding"].astype(np.float32)),
        ("obs/embedding", np.full((4, enc.dim), np.nan, np.float16)),
    ):
        arrays = dict(b.arrays)
        arrays[k] = bad
        with pytest.raises(WireError, match=k.split("/")[1]):
            decode(encode(TransitionBatch(0, 0, arrays)))


def test_the_store_counts_rows_per_version_and_a_run_with_another_encoder_is_refused(tmp_path):
    old, new = encoder(0), encoder(1)
    store = PersistentReplayStore(tmp_path / "r", StoreConfig(commit_ms=5)).open()
    store.insert(embed_batch(episode(0, 0, 6)[0], old)[0])
    store.insert(embed_batch(episode(1, 0, 4)[0], new)[0])
    assert store.flush()
    assert store.embedding_versions() == {old.version: 6, new.version: 4}
    # skip: windows of the old version are left out, and no frames are gathered
    cams = frozenset(f"{p}{c}" for p in ("obs/", "next_obs/") for c in ("front", "wrist"))
    s = Sampler(store, 32, {"online": 1.0}, window=2, exclude=cams, embedding_version=new.version)
    w = s.sample_now()
    assert w is not None and not cams & set(w)
    assert set(w["obs/embedding_version"]) == {new.version} == set(w["next_obs/embedding_version"])
    assert s.dropped_embeddings > 0
    store.close()
    store = PersistentReplayStore(tmp_path / "r").open()
    assert store.embedding_versions() == {old.version: 6, new.version: 4}  # in the store's meta, durable
    msg = check_store_versions(store.embedding_versions(), new, "replay store X")
    assert msg is not None and show_version(old.version) in msg and show_version(new.version) in msg
    assert "\n" not in msg and show_version(new.version) + " (" not in msg
    assert check_store_versions({new.version: 4}, new, "X") is None
    assert check_store_versions(store.embedding_versions(), new, "X", skip=True) is None
    assert issubclass(EmbeddingMismatch, ValueError)

    store.close()


def test_imported_rows_take_the_classifiers_reward_not_their_sources():
    """`reward_classifier=` runs: imported demonstrations are relabelled by the classifier on their
    next frames (reward, success, termination), as ClassifierReward labels the online ticks."""
    from types import SimpleNamespace

    from robo_async.buffer.tools import classifier_outcomes
    from robo_async.transport.wire import expand_next_obs

    # the classifier's interface (SuccessClassifier: meta + probability), judging by brightness
    clf = SimpleNamespace(
        meta=SimpleNamespace(cameras=("front",), threshold=0.5),
        probability=lambda fr: fr["front"].reshape(len(fr["front"]), -1).mean(1) / 255.0,
    )
    b, _ = episode(0, 0, 4, cams=("front",))
    full = expand_next_obs(b.arrays)
    full["next_obs/front"] = np.zeros_like(full["next_obs/front"])
    full["next_obs/front"][2:] = 255  # the last two ticks end bright: success there
    full["reward"] = np.full(4, 7.0, np.float32)  # the source's reward
    for arrays in (full, encode_frames(full, "qoi", 95)):  # raw frames, and frames as a store keeps them
        out = classifier_outcomes(TransitionBatch(0, 0, arrays), clf)
        np.testing.assert_array_equal(out.arrays["reward"], [0, 0, 1, 1])
        np.testing.assert_array_equal(out.arrays["success"], [False, False, True, True])
        np.testing.assert_array_equal(out.arrays["terminated"], [False, False, True, True])
    with pytest.raises(ValueError, match="next_obs/front"):
        classifier_outcomes(TransitionBatch(0, 0, {k: v for k, v in full.items() if k != "next_obs/front"}), clf)
