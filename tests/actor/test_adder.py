import numpy as np

from robo_async.actor import Adder
from robo_async.transport import EpisodeStats, TransitionBatch
from robo_async.transport.wire import WireError, decode, encode


class ListOutlet:
    def __init__(self):
        self.msgs = []

    def put(self, msg):
        self.msgs.append(msg)


def test_adder_numbers_transitions_and_flushes_on_episode_end():
    out = ListOutlet()
    adder = Adder(actor_id=2, outlet=out, flush_every=4, start_seq=100)
    for t in range(10):
        o = {"state": np.full(6, t, np.float32)}
        adder.add(
            o,
            np.zeros(6, np.float32),
            float(t),
            {"state": np.full(6, t + 1, np.float32)},
            t == 9,
            False,
            policy_version=t // 5,
        )
    adder.send_episode(EpisodeStats(2, 0, 45.0, 10, True, 1))
    msgs = out.msgs
    batches = [m for m in msgs if isinstance(m, TransitionBatch)]
    assert [(b.seq, b.count) for b in batches] == [(100, 4), (104, 4), (108, 2)]
    assert isinstance(msgs[-1], EpisodeStats)
    rewards = np.concatenate([b.arrays["reward"] for b in batches])
    np.testing.assert_array_equal(rewards, np.arange(10))
    # compact on the wire: each observation once, plus the batch's final next observation
    assert "next_obs/state" not in batches[-1].arrays
    np.testing.assert_array_equal(batches[-1].arrays["final_obs/state"][:, 0], [10])
    decoded = decode([bytes(f) for f in encode(batches[-1])])
    np.testing.assert_array_equal(decoded.arrays["next_obs/state"][:, 0], [9, 10])
    np.testing.assert_array_equal(
        decode([bytes(f) for f in encode(batches[0])]).arrays["next_obs/state"][:, 0], [1, 2, 3, 4]
    )
    np.testing.assert_array_equal(np.concatenate([b.arrays["policy_version"] for b in batches]), [0] * 5 + [1] * 5)
    assert adder.seq == 110


def test_compact_batch_with_a_mismatched_final_observation_is_refused():
    out = ListOutlet()
    adder = Adder(actor_id=0, outlet=out, flush_every=2)
    for t in range(2):
        adder.add(
            {"state": np.full(6, t, np.float32)},
            np.zeros(6, np.float32),
            0.0,
            {"state": np.full(6, t + 1, np.float32)},
            False,
            False,
            0,
        )
    arrays = dict(out.msgs[0].arrays)
    arrays["final_obs/state"] = np.zeros((1, 5), np.float32)  # wrong width
    with __import__("pytest").raises(WireError, match="final_obs/state"):
        decode([bytes(f) for f in encode(TransitionBatch(0, 0, arrays))])
