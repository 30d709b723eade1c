import numpy as np

from robo_async.actor import Adder
from robo_async.transport import EpisodeStats, TransitionBatch


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
        adder.add(o, np.zeros(6, np.float32), float(t), {"state": np.full(6, t + 1, np.float32)},
                  t == 9, False, policy_version=t // 5)
    adder.send_episode(EpisodeStats(2, 0, 45.0, 10, True, 1))
    msgs = out.msgs
    batches = [m for m in msgs if isinstance(m, TransitionBatch)]
    assert [(b.seq, b.count) for b in batches] == [(100, 4), (104, 4), (108, 2)]
    assert isinstance(msgs[-1], EpisodeStats)
    rewards = np.concatenate([b.arrays["reward"] for b in batches])
    np.testing.assert_array_equal(rewards, np.arange(10))
    np.testing.assert_array_equal(batches[-1].arrays["next_obs/state"][:, 0], [9, 10])
    np.testing.assert_array_equal(np.concatenate([b.arrays["policy_version"] for b in batches]),
                                  [0] * 5 + [1] * 5)
    assert adder.seq == 110
