"""Weight pushes: streamed parts, half precision, deltas against keyframes, checksums; through a
real publisher thread and subscriber sockets."""

import time

import numpy as np
import pytest

from robo_async.transport.assembler import Assembler
from robo_async.transport.channels import WeightClient
from robo_async.transport.publisher import WeightPublisher
from robo_async.transport.weights import PushConfig, encode_push, transmitted
from robo_async.transport.wire import WeightPart, Weights, decode, encode


def policy(seed=0, big=200_000):
    rng = np.random.default_rng(seed)
    return {
        "backbone.w": rng.normal(size=(big,)).astype(np.float32),
        "head.w": rng.normal(size=(64, 32)).astype(np.float32),
        "head.b": np.zeros(32, np.float32),
        "steps": np.array([3], np.int64),
    }


def wire(part: WeightPart) -> WeightPart:
    return decode([bytes(f) for f in encode(part)])


def newest(client: WeightClient, version: int, timeout: float = 30.0) -> Weights:
    deadline, got = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        w = client.take_weights()
        got = w or got
        if got is not None and got.version >= version:
            return got
        time.sleep(0.01)
    raise AssertionError(f"weights v{version} did not arrive (newest: {got and got.version})")


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_streamed_pushes_arrive_whole_and_deltas_carry_only_what_changed(precision):
    cfg = PushConfig(precision=precision, delta=True, part_mb=0.25, whole_mb=0)
    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=0.2, push=cfg)
    client = WeightClient(pub.address, every_s=0.005).start()
    try:
        w = policy()
        pub.publish(Weights(1, w, "net"))
        got = newest(client, 1)
        full_bytes = pub.push_bytes
        want = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in transmitted(w, precision).items()}
        assert all(np.array_equal(got.arrays[k], want[k]) for k in w) and got.arrays["backbone.w"].dtype == np.float32
        assert full_bytes == pytest.approx(sum(a.nbytes for a in transmitted(w, precision).values()), rel=0.01)
        w2 = {k: v.copy() for k, v in w.items()}
        w2["head.w"] += 1.0  # only the head trains (a frozen backbone)
        pub.publish(Weights(2, w2, "net"))
        got2 = newest(client, 2)
        want2 = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in transmitted(w2, precision).items()}
        assert all(np.array_equal(got2.arrays[k], want2[k]) for k in w)
        assert pub.push_bytes < 0.05 * full_bytes  # the backbone did not travel again
        assert client.weights_refused == 0
    finally:
        client.close()
        pub.close()


@pytest.mark.parametrize("delta", [False, True])
def test_an_fp16_push_sends_an_array_beyond_float16s_range_in_float32(delta):
    """A value beyond +-65,504 would become inf in half precision and every actor would refuse the
    push as malformed: that array travels in float32 (counted), the others in float16."""
    cfg = PushConfig(precision="fp16", delta=delta, part_mb=0.25, whole_mb=0)
    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=0.2, push=cfg)
    client = WeightClient(pub.address, every_s=0.005).start()
    try:
        w = policy()
        w["head.b"] = w["head.b"].copy()
        w["head.b"][0] = 1e6
        pub.publish(Weights(1, w, "net"))
        got = newest(client, 1)
        assert got.arrays["head.b"][0] == 1e6 and np.array_equal(got.arrays["head.b"], w["head.b"])  # as sent
        assert np.array_equal(got.arrays["backbone.w"], w["backbone.w"].astype(np.float16).astype(np.float32))
        assert pub.fp16_too_wide == 1 and client.weights_refused == 0
        w2 = {k: v.copy() for k, v in w.items()}
        w2["head.w"] += 1.0
        pub.publish(Weights(2, w2, "net"))  # (with delta: against the keyframe that held head.b in float32)
        got2 = newest(client, 2)
        assert np.array_equal(got2.arrays["head.b"], w2["head.b"]) and client.weights_refused == 0
    finally:
        client.close()
        pub.close()


def test_a_late_actor_gets_the_keyframe_and_the_newest_delta():
    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=0.2, push=PushConfig(delta=True, part_mb=0.25, whole_mb=0))
    try:
        w = policy(1)
        pub.publish(Weights(1, w, "net"))
        w2 = {k: v.copy() for k, v in w.items()}
        w2["head.b"] += 2.0
        deadline = time.monotonic() + 10
        while pub.pushes < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        pub.publish(Weights(2, w2, "net"))
        client = WeightClient(pub.address, every_s=0.005).start()  # joins after both pushes
        try:
            got = newest(client, 2)
            assert np.array_equal(got.arrays["head.b"], w2["head.b"])
            assert np.array_equal(got.arrays["backbone.w"], w["backbone.w"])
        finally:
            client.close()
    finally:
        pub.close()


def test_a_corrupted_or_mismatched_push_is_never_swapped_in():
    w = policy(2, big=50_000)
    parts, tx, _ = encode_push(1, w, "net", PushConfig(part_mb=0.05, whole_mb=0))
    assert len(parts) > 2
    asm = Assembler()
    hurt = dict(parts[1].arrays)
    name = next(iter(hurt))
    hurt[name] = hurt[name].copy()
    hurt[name][0] += 1.0  # a bit flipped in flight (well-formed, wrong)
    fed = [parts[0], WeightPart(**{**parts[1].__dict__, "arrays": hurt}), *parts[2:]]
    assert all(asm.feed(wire(p)) is None for p in fed)
    assert asm.bad == 1 and asm.completed == 0
    got = [asm.feed(wire(p)) for p in parts]  # the clean repeat completes
    assert got[-1] is not None and all(g is None for g in got[:-1]) and asm.completed == 1
    # a delta against a keyframe this actor does not hold: not applied, counted
    w2 = {k: v.copy() for k, v in w.items()}
    w2["head.w"][0, 0] = 5.0
    delta, _, keyframe = encode_push(3, w2, "net", PushConfig(delta=True), key=(2, tx))
    assert not keyframe
    assert all(Assembler().feed(wire(p)) is None for p in delta)
    fresh = Assembler()
    for p in delta:
        fresh.feed(wire(p))
    assert fresh.missing_base == 1
    # the same delta against the keyframe it was made from
    delta, _, _ = encode_push(3, w2, "net", PushConfig(delta=True), key=(1, tx))
    out = [asm.feed(wire(p)) for p in delta][-1]
    assert out is not None and out.version == 3 and out.arrays["head.w"][0, 0] == 5.0


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_part_carrying_nan_or_inf_is_refused_at_decode(precision, bad):
    w = policy(3, big=20_000)
    w["backbone.w"][12_345] = bad
    parts, _, _ = encode_push(1, w, "net", PushConfig(precision=precision, part_mb=0.05, whole_mb=0))
    from robo_async.transport.wire import WireError

    refused = 0
    for p in parts:
        try:
            wire(p)
        except WireError as e:
            assert "NaN or infinite" in str(e)
            refused += 1
    assert refused == 1  # exactly the part holding that element
    big = np.full(1 << 20, 3e38, np.float32)  # finite values whose float32 sum would overflow: accepted
    ok, _, _ = encode_push(2, {"w": big}, "net", PushConfig(part_mb=64))
    assert all(wire(p) for p in ok)


def test_frozen_arrays_are_neither_compared_nor_sent_in_deltas_and_keyframes_copy_them():
    from robo_async.transport.weights import keyframe_of

    cfg = PushConfig(delta=True, keyframe_every=3)
    w = policy(4, big=50_000)
    frozen = frozenset({"backbone.w"})
    parts, tx, keyframe = encode_push(1, w, "net", cfg, None, frozen)
    assert keyframe and not np.shares_memory(tx["backbone.w"], w["backbone.w"])  # the keyframe owns a copy
    key = keyframe_of(1, parts, tx, frozen)
    asm = Assembler()
    assert [asm.feed(wire(p)) for p in parts][-1] is not None
    # the live backbone changes although declared frozen: a delta trusts the declaration (not compared)
    w = {k: (v if k in frozen else v.copy()) for k, v in w.items()}  # as publish() hands them over
    w["backbone.w"][:10] += 1.0
    w["head.w"][0, 0] = 7.0
    delta, _, keyframe = encode_push(2, w, "net", cfg, key, frozen)
    assert not keyframe
    sent = {n.split(":")[1] for p in delta for n in p.arrays}
    assert sent == {"head.w"}, sent
    got = [asm.feed(wire(p)) for p in delta][-1]
    assert got.arrays["head.w"][0, 0] == 7.0 and got.arrays["backbone.w"][0] == tx["backbone.w"][0]
    # without the declaration the same change is found and sent
    plain, _, _ = encode_push(2, w, "net", cfg, key[:3])
    assert "backbone.w" in {n.split(":")[1] for p in plain for n in p.arrays}
    # an array declared frozen only after the keyframe was taken is still compared
    late = keyframe_of(1, parts, tx, frozenset())
    d2, _, _ = encode_push(2, w, "net", cfg, late, frozen)
    assert "backbone.w" in {n.split(":")[1] for p in d2 for n in p.arrays}
    # the next keyframe carries the backbone as it now is
    kf, _, keyframe = encode_push(4, w, "net", cfg, key, frozen)
    assert keyframe
    got = [asm.feed(wire(p)) for p in kf][-1]
    assert np.array_equal(got.arrays["backbone.w"], w["backbone.w"])


def test_an_algorithm_declares_its_untrained_policy_parameters_frozen():
    import torch

    from robo_async.learner.algorithms.base import Algorithm

    class Holder:
        frozen_weights = Algorithm.frozen_weights

    class P:
        def __init__(self):
            self.net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
            self.net[0].requires_grad_(False)

        module = lambda self: self.net

    from policies.base import Policy

    P.frozen = Policy.frozen
    h = Holder()
    h.policy = P()
    assert h.frozen_weights() == frozenset({"0.weight", "0.bias"})
    h.policy = object()  # a policy without the notion: nothing is frozen
    assert h.frozen_weights() == frozenset()


def test_a_status_only_subscriber_gets_statuses_and_acks_but_no_weight_parts():
    """`WeightClient(weights=False)` (an actor whose policy runs on a policy server) subscribes to
    the status topic only: the publisher never sends it a part. A full client on the same publisher
    is the witness that parts went out while both were subscribed; the sentinel status is sent
    after them, so on the same ordered stream a client subscribed to parts would have had them."""
    from robo_async.transport.wire import LearnerStatus

    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=3600, push=PushConfig(part_mb=0.25, whole_mb=0))
    full = WeightClient(pub.address, every_s=0.005).start()
    lean = WeightClient(pub.address, every_s=0.005, weights=False).start()
    try:
        deadline = time.monotonic() + 30
        while (full.status is None or lean.status is None) and time.monotonic() < deadline:
            pub.publish_status(LearnerStatus(0, 0, 0, 0, boot_id="first"))  # until both subscriptions are live
            time.sleep(0.01)
        assert full.status is not None and lean.status is not None
        pub.publish(Weights(1, policy(), "net"))
        newest(full, 1)  # every part was handed to every subscriber's pipe
        assert full.weight_messages >= 2  # a streamed push: several parts
        pub.publish_status(LearnerStatus(10, 1, 64, 128, boot_id="sentinel", acked=((0, 64),)))
        while lean.status.boot_id != "sentinel" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lean.status.boot_id == "sentinel" and lean.status.acked_for(0) == 64 and lean.statuses >= 2
        assert lean.weight_messages == 0 and lean.take_weights() is None and lean.dropped == 0
    finally:
        full.close()
        lean.close()
        pub.close()


def test_the_publisher_copies_only_arrays_that_are_views_of_live_cpu_tensors():
    """publish() snapshots the learner's arrays (they change with the next update) except those
    already private: copied off a device by weights() (`Policy.off_cpu()`)."""
    from policies.mlp import MLPPolicy

    p = MLPPolicy(("state",), (4,), [-1.0] * 2, [1.0] * 2, hidden=(8,))
    names = set(p.module().state_dict())
    assert p.off_cpu() == frozenset()  # on the CPU: weights() gives views, every one is copied
    p.module().to("meta")  # (a device other than the CPU, on a machine without a GPU)
    assert p.off_cpu() == names
    pub = WeightPublisher("tcp://127.0.0.1:*")
    try:
        pub._stop.set()  # its thread stopped first: what publish() hands over stays to be looked at
        pub._wake.set()
        pub._thread.join(timeout=10)
        live, private = np.zeros(4, np.float32), np.ones(4, np.float32)
        pub.publish(Weights(1, {"live": live, "private": private}, "net"), owned=frozenset({"private"}))
        snap = pub._weights.arrays
        assert snap["private"] is private and snap["live"] is not live and np.array_equal(snap["live"], live)
    finally:
        pub.close()


def test_a_snapshot_copies_every_array_into_one_block_and_keeps_what_it_is_told_to():
    from robo_async.transport.snapshots import snapshot

    arrays = {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "t": np.arange(10, dtype=np.float64)[::2],
        "s": np.array(2.5),
        "e": np.zeros((0, 3), np.float32),
        "i": np.arange(5, dtype=np.int64),
        "h": np.ones(3, np.float16),
        "kept": np.ones(2, np.float32),
    }
    snap = snapshot(arrays, frozenset({"kept"}))
    assert list(snap) == list(arrays) and snap["kept"] is arrays["kept"]
    for k, a in arrays.items():
        assert snap[k].dtype == a.dtype and snap[k].shape == a.shape and np.array_equal(snap[k], a)
        if k != "kept" and a.size:
            assert not np.shares_memory(snap[k], a) and snap[k].ctypes.data % 64 == 0  # aligned copies
    arrays["w"][0, 0] = 99.0  # the learner's next update: the snapshot does not see it
    assert snap["w"][0, 0] == 0.0


def test_an_array_up_to_whole_mb_travels_whole_and_is_kept_as_received():
    """Arrays up to `whole_mb` go as one piece each (a part of its own when bigger than part_mb): the
    actor keeps the received bytes (no copy); bigger ones are split and assembled."""
    w = {
        "a": np.arange(300_000, dtype=np.float32),
        "b": np.ones(200_000, np.float32),
        "big": np.full(600_000, 2.0, np.float32),
    }  # 1.2 MB, 0.8 MB, 2.4 MB
    parts, _, _ = encode_push(1, w, "net", PushConfig(part_mb=0.25, whole_mb=2.0))
    pieces = [name for p in parts for name in p.arrays]
    assert [n for n in pieces if n.startswith("d:a:")] == ["d:a:0"] and [n for n in pieces if n.startswith("d:b:")] == [
        "d:b:0"
    ]
    assert len([n for n in pieces if n.startswith("d:big:")]) > 1
    asm = Assembler()
    out = [asm.feed(wire(p)) for p in parts][-1]
    assert out is not None and all(np.array_equal(out.arrays[k], w[k]) for k in w)
    assert not out.arrays["a"].flags.owndata and not out.arrays["b"].flags.owndata  # the received frames' bytes
    assert out.arrays["big"].flags.owndata  # assembled from its pieces


def test_a_push_is_taken_at_once_while_statuses_are_throttled():
    """Statuses are drained at most every `every_s` (GIL hand-offs on the control process); a
    weight push must not wait for that: with every_s an hour, the push still arrives."""
    from robo_async.transport.wire import LearnerStatus

    # republished every 0.3 s: a weights subscription connected after the first push still gets it
    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=0.3, push=PushConfig(part_mb=0.25, whole_mb=0))
    client = WeightClient(pub.address, every_s=3600).start()
    try:
        deadline = time.monotonic() + 30
        while client.status is None and time.monotonic() < deadline:
            pub.publish_status(LearnerStatus(0, 0, 0, 0, boot_id="first"))  # until the subscriptions are live
            time.sleep(0.01)
        assert client.status is not None  # taken; the next status drain is an hour away
        pub.publish(Weights(1, policy(), "net"))
        assert newest(client, 1).version == 1 and client.weight_messages >= 2
        pub.publish_status(LearnerStatus(5, 0, 0, 0, boot_id="second"))
        time.sleep(0.3)
        assert client.status.boot_id == "first"  # statuses wait for their throttle
    finally:
        client.close()
        pub.close()


def test_a_keyframe_brings_each_digest_with_its_array_and_a_bad_array_is_refused_as_it_comes():
    """A keyframe's digests are computed as it goes: part 0's manifest lists 0, and each array's
    digest comes in the part carrying its last piece. The actor checks an array the moment that
    part is in (a corrupt one ends the push there, not after every other part); parts out of order
    are checked at the end."""
    from robo_async.transport.weights import digest

    rng = np.random.default_rng(4)
    w = {
        "a": rng.normal(size=50_000).astype(np.float32),
        "b": rng.normal(size=(500, 100)).astype(np.float32),
        "c": np.arange(7, dtype=np.int64),
    }
    parts, tx, _ = encode_push(1, w, "net", PushConfig(part_mb=0.05, whole_mb=0))
    assert len(parts) > 3 and all(c == 0 for _, _, _, c in parts[0].manifest)
    carried = [(n, c, i) for i, p in enumerate(parts) for n, c in p.sums]
    assert sorted(n for n, _, _ in carried) == sorted(w)  # each array's digest once ...
    for n, c, i in carried:  # ... in the part holding its last piece, the digest of what travels
        assert c == digest(tx[n]) and max(j for j, p in enumerate(parts) for k in p.arrays if k.split(":")[1] == n) == i
    first = next(i for i, p in enumerate(parts) if p.sums and i < len(parts) - 1)
    hurt = dict(parts[first].arrays)
    name = next(iter(hurt))
    hurt[name] = hurt[name].copy()
    hurt[name][-1] += 1.0  # well-formed, wrong
    asm = Assembler()
    for p in parts[:first]:
        asm.feed(wire(p))
    assert asm.feed(wire(WeightPart(**{**parts[first].__dict__, "arrays": hurt}))) is None
    assert asm.bad == 1 and not asm.busy  # refused there and then
    # out of order: checked once all are in, a corrupt one still refused, a clean one taken
    shuffled = [parts[0], *parts[1:][::-1]]
    asm = Assembler()
    got = [asm.feed(wire(p)) for p in shuffled]
    assert got[-1] is not None and all(np.array_equal(got[-1].arrays[k], w[k]) for k in w)
    bad = [
        parts[0],
        *[WeightPart(**{**p.__dict__, "arrays": hurt}) if i == first else p for i, p in enumerate(parts) if i][::-1],
    ]
    assert [asm.feed(wire(p)) for p in bad][-1] is None and asm.bad == 1
    # a digest for an array the manifest does not list, or no digest at all: refused
    odd = [
        parts[0],
        *[
            WeightPart(**{**p.__dict__, "sums": (("ghost", 1),) if i == 1 else p.sums})
            for i, p in enumerate(parts)
            if i
        ],
    ]
    asm = Assembler()
    assert [asm.feed(wire(p)) for p in odd][-1] is None and asm.bad == 1
    bare = [WeightPart(**{**p.__dict__, "sums": ()}) for p in parts]
    assert [asm.feed(wire(p)) for p in bare][-1] is None and asm.bad == 2


@pytest.mark.parametrize("sums", [[["a"]], [["a", -1]], [["", 3]], [["a", 1], ["a", 2]], "a", [["a", 1.5]]])
def test_malformed_digests_in_a_weights_part_are_named(sums):
    import msgpack

    from robo_async.transport.wire import WireError

    frames = encode(encode_push(1, policy(5, big=10), "net", PushConfig())[0][0])
    header = msgpack.unpackb(bytes(frames[0]))
    header["sums"] = sums
    with pytest.raises(WireError, match="'sums'"):
        decode([msgpack.packb(header), *[bytes(f) for f in frames[1:]]])


def test_snapshot_blocks_are_reused_only_once_nothing_refers_to_them():
    """publish()'s copies go into blocks reused from push to push (fresh memory costs page faults);
    a block still referred to (a push being sent, its frames in ZMQ, a keyframe kept) is never
    written over."""
    from robo_async.transport.snapshots import SnapshotBlocks, snapshot, snapshot_bytes

    arrays = {"w": np.arange(1000, dtype=np.float32), "b": np.ones(7, np.float64)}
    blocks = SnapshotBlocks(keep=2, prefault=snapshot_bytes(arrays))
    first = snapshot(arrays, blocks=blocks)
    assert (blocks.fresh, blocks.reused) == (0, 1)  # the block touched at the start
    arrays["w"] += 1.0
    second = snapshot(arrays, blocks=blocks)  # the first is still held: a fresh block
    assert (blocks.fresh, blocks.reused) == (1, 1)
    assert first["w"][0] == 0.0 and second["w"][0] == 1.0
    held = memoryview(second["w"])  # e.g. a zero-copy frame ZMQ has not sent yet
    del first, second
    arrays["w"] += 1.0
    third = snapshot(arrays, blocks=blocks)  # the first's block is free again, the second's is not
    assert (blocks.fresh, blocks.reused) == (1, 2)
    assert np.frombuffer(held, np.float32)[0] == 1.0 and third["w"][0] == 2.0
    arrays["w"] += 1.0
    fourth = snapshot(arrays, blocks=blocks)  # both held blocks in use: fresh memory, not kept
    assert (blocks.fresh, blocks.reused) == (2, 2) and third["w"][0] == 2.0 and fourth["w"][0] == 3.0
    del held
    arrays["w"] += 1.0
    assert snapshot(arrays, blocks=blocks)["w"][0] == 4.0 and blocks.reused == 3


def test_a_delta_published_while_its_keyframe_is_still_going_out_applies_to_the_whole_keyframe():
    """Keyframe parts are sealed (digested, encoded) as they go. A delta published before the
    keyframe's last part went out waits for the keyframe to go out whole (a push in flight is never
    replaced: a slow push still arrives), then goes as a delta against it; a late actor gets that
    keyframe from the repeats, then the delta."""
    from robo_async.transport.channels import WEIGHTS_TOPIC

    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=0.2, push=PushConfig(delta=True, part_mb=0.05, whole_mb=0))
    send, blocked = pub._send, [True]
    pub._send = lambda frames, lossy=False: not (blocked[0] and frames[0] == WEIGHTS_TOPIC) and send(frames, lossy)
    try:
        w = policy(6, big=400_000)
        pub.publish(Weights(1, w, "net"))
        deadline = time.monotonic() + 30
        while pub._weights is not None and time.monotonic() < deadline:  # the thread took v1: its part 0 waits
            time.sleep(0.001)
        w2 = {k: v.copy() for k, v in w.items()}
        w2["head.b"] += 3.0
        pub.publish(Weights(2, w2, "net"))  # before v1's parts could go
        time.sleep(0.2)  # (the thread wakes a few times meanwhile: v2 must still wait)
        assert pub.pushes == 0 and pub._weights is not None and pub._weights.version == 2  # v1 still in flight
        blocked[0] = False
        while pub.pushes < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pub.pushes == 2  # v1 whole, then v2
        assert 0 < pub.push_bytes < 0.05 * sum(a.nbytes for a in w.values())  # v2: a delta against v1
        client = WeightClient(pub.address, every_s=0.005).start()
        try:
            got = newest(client, 2)  # v1 whole from the repeats, then v2
            assert all(np.array_equal(got.arrays[k], w2[k]) for k in w) and client.weights_refused == 0
        finally:
            client.close()
    finally:
        pub.close()


def test_a_full_push_slower_than_the_publish_interval_is_sent_whole_and_the_newest_follows():
    """Full (non-delta) pushes published faster than they go out: the one in flight is never cut
    off by a newer one (before, no actor completed any push); the newest waiting one follows it,
    those between are superseded."""
    from robo_async.transport.channels import WEIGHTS_TOPIC

    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=3600, push=PushConfig(part_mb=0.05, whole_mb=0))
    send, blocked = pub._send, [True]
    pub._send = lambda frames, lossy=False: not (blocked[0] and frames[0] == WEIGHTS_TOPIC) and send(frames, lossy)
    client = WeightClient(pub.address, every_s=0.005).start()
    try:
        w = policy(3, big=400_000)
        deadline = time.monotonic() + 30
        pub.publish(Weights(1, w, "net"))
        while pub._weights is not None and time.monotonic() < deadline:  # v1 taken: in flight, blocked
            time.sleep(0.001)
        for v in (2, 3):
            pub.publish(Weights(v, {k: a + v for k, a in w.items()}, "net"))
        blocked[0] = False
        while pub.pushes < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pub.pushes == 2  # v1 whole, then v3 (v2 superseded while it waited)
        got = newest(client, 3)
        assert all(np.array_equal(got.arrays[k], w[k] + 3) for k in w)
    finally:
        client.close()
        pub.close()


def test_a_keyframe_goes_out_while_publish_still_copies_but_no_part_before_its_arrays_are_copied(monkeypatch):
    """publish() copies array by array; the publisher thread sends the parts of arrays already
    copied meanwhile, and waits for the rest: no part leaves before the arrays it holds pieces of
    were copied (else it would carry half-copied values)."""
    import threading

    import msgpack

    from robo_async.transport import channels, publisher

    events, cond, waiting = [], threading.Condition(), [False]
    advance, wait = publisher._Copying.advance, publisher._Copying.wait

    def advanced(self):
        advance(self)
        with cond:
            events.append(("copied", self._copied))
            cond.notify_all()
            if self._copied == 1:  # "b" not copied yet: hold the copy until the thread waits for it (or sent it)
                cond.wait_for(lambda: waiting[0] or any(e[0] == "sent" and "b" in e[1] for e in events), timeout=30)

    def waited(self, names=None):
        names = None if names is None else list(names)
        if names is not None and "b" in names and self._copied < 2:
            with cond:
                waiting[0] = True
                cond.notify_all()
        wait(self, names)

    monkeypatch.setattr(publisher._Copying, "advance", advanced)
    monkeypatch.setattr(publisher._Copying, "wait", waited)
    monkeypatch.setattr(publisher, "PIPELINE_BYTES", 0)  # (a copy this small is otherwise made before the hand-off)
    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=0.2, push=PushConfig(part_mb=0.25, whole_mb=0))
    send = pub._send

    def sent(frames, lossy=False):
        ok = send(frames, lossy)
        if ok and frames[0] == channels.WEIGHTS_TOPIC:
            with cond:
                events.append(("sent", {s[0].split(":")[1] for s in msgpack.unpackb(bytes(frames[1]))["arrays"]}))
                cond.notify_all()
        return ok

    pub._send = sent
    client = WeightClient(pub.address, every_s=0.005).start()
    try:
        rng = np.random.default_rng(7)
        w = {"a": rng.normal(size=300_000).astype(np.float32), "b": rng.normal(size=300_000).astype(np.float32)}
        pub.publish(Weights(1, w, "net"))
        got = newest(client, 1)
        assert all(np.array_equal(got.arrays[k], w[k]) for k in w) and client.weights_refused == 0
        with cond:
            order = list(events)
        b_copied = order.index(("copied", 2))
        assert waiting[0] and any(e[0] == "sent" for e in order[:b_copied])  # parts of "a" went meanwhile
        assert not any(e[0] == "sent" and "b" in e[1] for e in order[:b_copied])  # none of "b" before its copy
    finally:
        client.close()
        pub.close()


def test_a_half_precision_push_converts_in_the_snapshot_and_the_actor_gets_float32_back():
    """With precision=fp16 the publisher's copy is the conversion (float32 held as float16: half
    the block, no second pass), and the actor turns each array back to float32 as it is checked."""
    from robo_async.transport.snapshots import snapshot_bytes
    from robo_async.transport.snapshots import snapshot_layout as _layout

    w = policy(8, big=300_000)
    assert snapshot_bytes(w, precision="fp16") < 0.6 * snapshot_bytes(w)
    held, copies = _layout(w, frozenset(), None, half=True)
    assert held["backbone.w"].dtype == np.float16 and held["steps"].dtype == np.int64 and len(copies) == len(w)
    pub = WeightPublisher(
        "tcp://127.0.0.1:0",
        republish_s=0.2,
        push=PushConfig(precision="fp16", part_mb=0.25),
        snapshot_bytes=snapshot_bytes(w, precision="fp16"),
    )
    client = WeightClient(pub.address, every_s=0.005).start()
    try:
        pub.publish(Weights(1, w, "net"))
        got = newest(client, 1)
        assert pub.blocks.reused == 1 and pub.blocks.fresh == 0  # into the block touched at the start
        for k, a in w.items():
            want = a.astype(np.float16).astype(np.float32) if a.dtype == np.float32 else a
            assert got.arrays[k].dtype == want.dtype and np.array_equal(got.arrays[k], want)
        assert client.weights_refused == 0
    finally:
        client.close()
        pub.close()


def test_an_actor_that_subscribes_after_a_push_gets_it_at_once_without_periodic_repeats():
    """The publisher sees subscriptions (XPUB): an actor that connects after the newest push got
    it at once, not at the next periodic repeat (here an hour away)."""
    pub = WeightPublisher("tcp://127.0.0.1:0", republish_s=3600, push=PushConfig(part_mb=0.25))
    try:
        w = policy(9)
        pub.publish(Weights(1, w, "net"))
        deadline = time.monotonic() + 30
        while pub.pushes < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pub.pushes == 1 and pub.joins == 0  # sent to nobody
        client = WeightClient(pub.address, every_s=0.005).start()
        try:
            got = newest(client, 1)
            assert all(np.array_equal(got.arrays[k], w[k]) for k in w) and pub.joins >= 1
        finally:
            client.close()
    finally:
        pub.close()


def _stopped_subscriber(address: str) -> None:  # a process that subscribes, then is SIGSTOPped by the test
    c = WeightClient(address, every_s=0.005).start()
    while True:
        time.sleep(0.1)
        c.take_weights()


def test_a_stopped_subscriber_does_not_hold_back_the_others_weights_or_acks():
    """Two actors; one is stopped (SIGSTOP: its queue fills and stays full, as with a host whose
    connection stays half-open). Before, every later push waited for it: the other actor's policy
    froze. Now statuses never wait for a full queue, and a stream held up STALL_S goes on without
    the stopped one (`stalls`): the other gets every newer push."""
    import multiprocessing as mp
    import os
    import signal

    from robo_async.transport.wire import LearnerStatus

    pub = WeightPublisher(
        "tcp://127.0.0.1:0", republish_s=1.0, push=PushConfig(part_mb=1), queue_mb=8, weights_bytes=8 << 20
    )
    ctx = mp.get_context("spawn")
    stopped = ctx.Process(target=_stopped_subscriber, args=(pub.address,), daemon=True)
    stopped.start()
    healthy = WeightClient(pub.address, every_s=0.005).start()
    try:
        w = {"w": np.zeros(4_000_000, np.float32)}  # 16 MB a push: two fill the stopped one's queue
        deadline = time.monotonic() + 60
        while pub.joins < 2 and time.monotonic() < deadline:  # both subscribed
            pub.publish(Weights(0, w, "n"))
            time.sleep(0.1)
        assert pub.joins >= 2
        os.kill(stopped.pid, signal.SIGSTOP)
        version, seen = 0, 0
        while pub.stalls == 0 and time.monotonic() < deadline:  # push on until the stopped one holds us up
            version += 1
            pub.publish(Weights(version, {"w": w["w"] + version}, "n"))
            time.sleep(0.2)
        assert pub.stalls >= 1, "the stopped subscriber never held the stream up (its queue never filled)"
        after = version + 1  # a push and a status from after the stall: both reach the healthy actor
        pub.publish(Weights(after, {"w": w["w"] + after}, "n"))
        pub.publish_status(LearnerStatus(after, after, after, after))
        while time.monotonic() < deadline and (
            seen < after or healthy.status is None or healthy.status.version < after
        ):
            got = healthy.take_weights()
            seen = got.version if got is not None else seen
            time.sleep(0.02)
        assert seen == after and healthy.status.version == after
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
        stopped.kill()
        healthy.close()
        pub.close()
