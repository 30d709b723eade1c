"""Leases across real processes: exclusive, named holders, freed when the holder dies."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from hal.leases import LeaseHeld, LeaseManager
from hal.resources import InventoryError, LeaseError, acquire_needs, discover, load_inventory, parse_needs

HOLDER = textwrap.dedent("""
    import sys, time
    from hal.leases import LeaseManager
    lease = LeaseManager(sys.argv[1]).acquire(sys.argv[2], job=sys.argv[3])
    print("held", flush=True)
    time.sleep(float(sys.argv[4]))
    lease.release()
    print("released", flush=True)
    time.sleep(60)
""")


def hold(tmp_path, rid, job="other-job", seconds=600.0):
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path), rid, job, str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "held"
    return p


def test_a_held_lease_fails_fast_naming_the_holder_and_frees_when_it_dies(tmp_path):
    leases = LeaseManager(tmp_path)
    p = hold(tmp_path, "robot:so101_follower/left")
    with pytest.raises(LeaseHeld, match=f"held by job 'other-job' \\(pid {p.pid}"):
        leases.acquire("robot:so101_follower/left", job="mine")
    assert leases.holder("robot:so101_follower/left")["pid"] == p.pid
    p.send_signal(signal.SIGKILL)
    p.wait()
    with leases.acquire("robot:so101_follower/left", job="mine") as lease:  # the kernel freed it
        assert lease.held
        assert leases.holder("robot:so101_follower/left")["job"] == "mine"
    assert leases.holder("robot:so101_follower/left") is None


def test_a_waiting_job_gets_the_lease_when_the_holder_releases(tmp_path):
    p = hold(tmp_path, "sim:reach/0", seconds=0.5)
    lease = LeaseManager(tmp_path).acquire("sim:reach/0", job="queued", wait_s=30)
    assert lease.held
    lease.release()
    p.kill()
    p.wait()


def test_needs_are_all_or_nothing(tmp_path):
    leases = LeaseManager(tmp_path)
    found = discover(sims={"reach": 3})
    assert [r.id for r in found if r.kind == "sim"] == ["sim:reach/0", "sim:reach/1", "sim:reach/2"]
    p = hold(tmp_path, "sim:reach/1")
    got = acquire_needs(found, parse_needs(["sim:reach*2"]), leases, job="two")
    assert sorted(r.id for r, _ in got) == ["sim:reach/0", "sim:reach/2"]
    with pytest.raises(LeaseHeld, match="needs 1 x sim:reach but"):
        acquire_needs(found, parse_needs(["sim:reach"]), leases, job="third")
    for _, lease in got:
        lease.release()
    with pytest.raises(LeaseError, match="needs 2 x robot:so101_follower; this machine has none"):
        acquire_needs(found, parse_needs(["robot:so101_follower*2"]), leases, job="real")
    p.kill()
    p.wait()


def test_a_refusal_names_each_holder_once_with_the_resources_it_holds(tmp_path):
    leases = LeaseManager(tmp_path)
    found = discover(sims={"reach": 10})
    mine = acquire_needs(found, parse_needs(["sim:reach*8"]), LeaseManager(tmp_path), job="big")
    p = hold(tmp_path, "sim:reach/8", job="small")
    with pytest.raises(LeaseHeld) as e:
        acquire_needs(found, parse_needs(["sim:reach*3"]), leases, job="third")
    msg = str(e.value)
    assert msg.count("held by job 'big'") == 1 and msg.count("held by job 'small'") == 1, msg
    assert "sim:reach/0, sim:reach/1, sim:reach/2, ... sim:reach/7 (8 in all) are held by job 'big'" in msg, msg
    assert f"sim:reach/8 is held by job 'small' (pid {p.pid}" in msg, msg
    assert len(msg) < 400, msg
    for _, lease in mine:
        lease.release()
    p.kill()
    p.wait()


def test_inventory_entries_and_their_errors(tmp_path):
    inv = tmp_path / "robots.yaml"
    inv.write_text(
        "- {kind: robot, type: so101_follower, name: left, port: /dev/ttyACM77}\n"
        "- {kind: teleop, type: so101_leader, name: leader, port: /dev/null}\n"
    )
    left, leader = load_inventory(inv)
    assert left.id == "robot:so101_follower/left" and left.health.startswith("missing: /dev/ttyACM77")
    assert leader.health == "ok" and leader.option("port") == "/dev/null"
    inv.write_text("- {kind: robot, name: left}\n")
    with pytest.raises(InventoryError, match=r"entry 1: missing \['type'\]"):
        load_inventory(inv)
    inv.write_text("- [unbalanced\n")
    with pytest.raises(InventoryError, match="cannot be read"):
        load_inventory(inv)
    with pytest.raises(ValueError, match="kind\\[:type\\]\\[\\*count\\]"):
        parse_needs(["robots*2"])


def test_resources_command_lists_what_is_here(tmp_path):
    env = {**os.environ, "ROBO_ASYNC_LEASE_DIR": str(tmp_path)}
    p = hold(tmp_path, "sim:reach/0", job="busy-job")
    out = subprocess.run(
        [sys.executable, "-m", "robo_async.cli", "resources", "sims=reach:2"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    row = [ln for ln in out.stdout.splitlines() if "sim:reach/0" in ln][0]
    assert "busy-job" in row and str(p.pid) in row
    assert [ln for ln in out.stdout.splitlines() if "sim:reach/1" in ln][0].rstrip().endswith("-")
    p.kill()
    p.wait()


def test_motor_buses_are_recognised_by_usb_ids_from_pyserials_port_list():
    from serial.tools.list_ports_common import ListPortInfo

    from hal.resources import serial_buses

    ports = []
    for dev, ids in {
        "/dev/ttyACM0": (0x1A86, 0x55D3),
        "/dev/ttyUSB0": (0x0403, 0x6014),
        "/dev/ttyACM1": (0x2341, 0x0043),
        "/dev/ttyS0": None,
    }.items():
        p = ListPortInfo(dev, skip_link_detection=True)
        if ids:
            p.vid, p.pid = ids
        ports.append(p)
    found = {r.id: r.where for r in serial_buses(ports)}
    assert found == {"serial:feetech/ttyACM0": "/dev/ttyACM0", "serial:dynamixel/ttyUSB0": "/dev/ttyUSB0"}


def test_cameras_come_from_lerobots_finder():
    from hal.resources import cameras

    found = cameras(
        [
            {
                "name": "OpenCV Camera @ /dev/video2",
                "type": "OpenCV",
                "id": "/dev/video2",
                "default_stream_profile": {"width": 640, "height": 480, "fps": 30.0, "format": 0.0},
            }
        ]
    )
    assert [(r.id, r.where, r.option("width")) for r in found] == [("camera:opencv/video2", "/dev/video2", 640)]
    assert cameras() == []  # this machine has none: LeRobot's finder opens nothing
