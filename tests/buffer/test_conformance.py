"""Both replay stores pass the same conformance suite, and the suite catches a store that breaks it."""

import pytest

from robo_async.buffer.conformance import ConformanceError, check_store
from robo_async.buffer.lmdb_store import PersistentReplayStore
from robo_async.buffer.store import InMemoryReplayStore


def test_in_memory_store_conforms():
    check_store(lambda: InMemoryReplayStore(100))


def test_persistent_store_conforms(tmp_path):
    check_store(lambda: PersistentReplayStore(tmp_path / "replay").open())


def test_suite_catches_a_store_that_takes_batches_past_a_gap():
    class Gappy(InMemoryReplayStore):
        def insert(self, batch, table="online"):
            self._hw[batch.actor_id] = min(self._hw.get(batch.actor_id, 0), batch.seq)  # forgets the mark
            return super().insert(batch, table)

    with pytest.raises(ConformanceError, match="gap|resent"):
        check_store(lambda: Gappy(100))
