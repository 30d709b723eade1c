"""The servo-bus twin's framing and firmware, byte for byte, without a terminal."""

import numpy as np

from hardware.twin.arm import MOTORS, TwinArm
from hardware.twin.protocol import (
    PING,
    READ,
    REG,
    SYNC_READ,
    SYNC_WRITE,
    WRITE,
    ServoBus,
    decode_sign_magnitude,
    encode_sign_magnitude,
    instruction_packet,
    status_packet,
)


def _arm_bus():
    arm = TwinArm(seed=3)
    return arm, ServoBus(arm.servos)


def test_ping_read_and_split_packets_are_answered_in_order():
    arm, bus = _arm_bus()
    ping = instruction_packet(2, PING)
    read = instruction_packet(2, READ, bytes((3, 2)))  # model number
    # split in the middle of a packet, with garbage before the header
    out = bus.feed(b"\x00\x13" + ping + read[:3]) + bus.feed(read[3:])
    assert out == status_packet(2, 0) + status_packet(2, 0, (777).to_bytes(2, "little"))


def test_bad_checksum_and_impossible_length_are_dropped_and_counted():
    arm, bus = _arm_bus()
    bad = bytearray(instruction_packet(1, PING))
    bad[-1] ^= 0xFF
    assert bus.feed(bytes(bad)) == b""
    assert bus.feed(b"\xff\xff\x01\x01\x01") == b""  # length 1: impossible
    assert bus.malformed == 2
    assert bus.feed(instruction_packet(1, PING)) == status_packet(1, 0)  # the bus still answers


def test_sync_write_moves_goals_and_sync_read_answers_each_servo():
    arm, bus = _arm_bus()
    addr, n = REG["Torque_Enable"]
    bus.feed(instruction_packet(0xFE, SYNC_WRITE, bytes([addr, n] + [b for i in (1, 2) for b in (i, 1)])))
    assert arm.torque[:2].tolist() == [True, True] and not arm.torque[2]
    # goal of servo 1: 300 ticks above where it reads now
    addr, n = REG["Present_Position"]
    reply = bus.feed(instruction_packet(0xFE, SYNC_READ, bytes([addr, n, 1, 2])))
    assert len(reply) == 2 * 8 and reply[2] == 1 and reply[10] == 2
    present = decode_sign_magnitude(int.from_bytes(reply[5:7], "little"), 15)
    goal = present + 300
    addr, n = REG["Goal_Position"]
    bus.feed(
        instruction_packet(
            0xFE, SYNC_WRITE, bytes([addr, n, 1]) + encode_sign_magnitude(goal, 15).to_bytes(2, "little")
        )
    )
    assert np.isclose(arm.data.ctrl[0], 300 * 2 * np.pi / 4096, atol=2e-3)
    arm.step(1.0)
    assert np.isclose(arm.joints()[0], arm.data.ctrl[0], atol=0.02)  # the position servo got there


def test_torque_off_is_limp_and_faults_unload_and_report():
    arm, bus = _arm_bus()
    addr, _ = REG["Torque_Enable"]
    bus.feed(instruction_packet(3, WRITE, bytes((addr, 1))))
    assert arm.torque[2]
    arm.fault("elbow_flex", "overheat")
    assert not arm.torque[2]  # unloaded
    reply = bus.feed(instruction_packet(3, READ, bytes((REG["Status"][0], 1))))
    assert reply[4] & 4 and reply[5] & 4  # the error byte and the Status register say overheating
    bus.feed(instruction_packet(3, WRITE, bytes((addr, 1))))
    assert not arm.torque[2]  # refused until the fault is cleared
    arm.fault("elbow_flex", "clear")
    bus.feed(instruction_packet(3, WRITE, bytes((addr, 1))))
    assert arm.torque[2]


def test_calibration_reads_the_middle_pose_as_2047_and_ranges_cover_the_joints():
    arm = TwinArm(seed=5)
    cal = arm.calibration()
    assert list(cal) == list(MOTORS)
    for i, m in enumerate(MOTORS):
        present = (arm.actual_ticks(i, 0.0) - cal[m]["homing_offset"]) % 4096
        assert present == 2047
        assert cal[m]["range_min"] < cal[m]["range_max"]
    assert len({c["homing_offset"] for c in cal.values()}) > 1  # the horns sit differently: calibration matters


def test_whole_arm_position_reads_are_kept_as_the_angles_their_ticks_stand_for():
    arm, bus = _arm_bus()
    bus.on_sync_read = arm.note_sync_read
    q = np.array([0.4, -0.3, 0.2, 0.1, -1.0, 0.5])
    arm.set_joints(q)
    addr, n = REG["Present_Position"]
    bus.feed(instruction_packet(0xFE, SYNC_READ, bytes([addr, n, 1, 2, 3, 4, 5, 6])))
    bus.feed(instruction_packet(0xFE, SYNC_READ, bytes([addr, n, 1, 2, 3])))  # not the whole arm
    addr_t, n_t = REG["Present_Temperature"]
    bus.feed(instruction_packet(0xFE, SYNC_READ, bytes([addr_t, n_t, 1, 2, 3, 4, 5, 6])))  # not positions
    assert arm.readings_total == 1
    np.testing.assert_allclose(arm.readings[0], q, atol=0.5 * 2 * np.pi / 4096)  # within half a tick
