"""A twin of an SO-101 (follower and leader) for the tests: the same command a user runs
(`python -m hardware.twin so101 ...`, which `robo-async twin so101` is), in its own process."""

from pathlib import Path

import pytest

from hardware.twin.process import BUS_TIMEOUT_MS, TwinProcess

__all__ = ["BUS_TIMEOUT_MS", "RunningTwin"]


class RunningTwin(TwinProcess):
    """A started `TwinProcess` (tests build it with or without the camera)."""

    def __init__(self, root: Path, camera: bool = False) -> None:
        super().__init__(root, camera=camera)
        self.start()


@pytest.fixture
def twin(tmp_path):
    t = RunningTwin(tmp_path / "twin")
    yield t
    t.close()
