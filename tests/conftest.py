import os
import tempfile

os.environ.setdefault("MUJOCO_GL", "egl")
# Each test session (each xdist worker: `make test` runs two) leases robots and simulator slots in
# a directory of its own, so concurrent test files never hold each other's robots, and a test run
# never touches the leases of a real job on this machine. Child processes inherit it.
os.environ["ROBO_ASYNC_LEASE_DIR"] = tempfile.mkdtemp(
    prefix=f"robo_async_leases_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_"
)
