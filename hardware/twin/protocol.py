"""The Feetech SCS/STS serial protocol (protocol 0) as a bus of servos answers it.

What LeRobot's `FeetechMotorsBus` (through `scservo_sdk`) sends, byte for byte:

    instruction  FF FF <id> <len> <instr> <params...> <checksum>
    status       FF FF <id> <len> <error> <data...>   <checksum>

`len` counts instruction/error, params and checksum; the checksum is `~(id + len + instr + params)
& 0xFF`. Instructions: PING 0x01, READ 0x02 `[addr, n]`, WRITE 0x03 `[addr, bytes...]`,
SYNC READ 0x82 `[addr, n, ids...]` (each servo answers with its own status packet, in id order),
SYNC WRITE 0x83 `[addr, n, (id, bytes...)...]` (no answer). Broadcast id 0xFE gets no answer but to
SYNC READ. Multi-byte registers are little-endian; positions and the homing offset are
sign-magnitude (bit 15 / bit 11), as `lerobot/motors/feetech/tables.py` says.

`ServoBus.feed(bytes) -> bytes` parses whatever arrived (split or joined packets, garbage before a
header, bad checksums are dropped as a servo drops them) and returns the answers. The registers'
meaning (goal, torque, present position) lives in `Servo`; this module knows only the framing.
"""

from __future__ import annotations

from collections.abc import Callable

PING, READ, WRITE, REG_WRITE, ACTION, SYNC_READ, SYNC_WRITE = 0x01, 0x02, 0x03, 0x04, 0x05, 0x82, 0x83
BROADCAST = 0xFE

# status error bits (scservo_sdk: ERRBIT_*)
ERR_VOLTAGE, ERR_ANGLE, ERR_OVERHEAT, ERR_OVERELE, ERR_OVERLOAD = 1, 2, 4, 8, 32

# the STS3215's control table as LeRobot names it: name -> (address, bytes)
REG = {
    "Firmware_Major_Version": (0, 1),
    "Firmware_Minor_Version": (1, 1),
    "Model_Number": (3, 2),
    "ID": (5, 1),
    "Baud_Rate": (6, 1),
    "Return_Delay_Time": (7, 1),
    "Response_Status_Level": (8, 1),
    "Min_Position_Limit": (9, 2),
    "Max_Position_Limit": (11, 2),
    "Max_Temperature_Limit": (13, 1),
    "Max_Voltage_Limit": (14, 1),
    "Min_Voltage_Limit": (15, 1),
    "Max_Torque_Limit": (16, 2),
    "Phase": (18, 1),
    "P_Coefficient": (21, 1),
    "D_Coefficient": (22, 1),
    "I_Coefficient": (23, 1),
    "Protection_Current": (28, 2),
    "Homing_Offset": (31, 2),
    "Operating_Mode": (33, 1),
    "Overload_Torque": (36, 1),
    "Torque_Enable": (40, 1),
    "Acceleration": (41, 1),
    "Goal_Position": (42, 2),
    "Goal_Velocity": (46, 2),
    "Torque_Limit": (48, 2),
    "Lock": (55, 1),
    "Present_Position": (56, 2),
    "Present_Velocity": (58, 2),
    "Present_Load": (60, 2),
    "Present_Voltage": (62, 1),
    "Present_Temperature": (63, 1),
    "Status": (65, 1),
    "Moving": (66, 1),
    "Present_Current": (69, 2),
    "Maximum_Acceleration": (85, 1),
}
STS3215_MODEL = 777
RESOLUTION = 4096


def checksum(body: bytes | bytearray) -> int:
    """`~(sum of id, length, instruction/error and params) & 0xFF`."""
    return ~sum(body) & 0xFF


def status_packet(servo_id: int, error: int, data: bytes = b"") -> bytes:
    """A servo's answer: FF FF id len error data checksum."""
    body = bytes((servo_id, len(data) + 2, error)) + data
    return b"\xff\xff" + body + bytes((checksum(body),))


def instruction_packet(servo_id: int, instr: int, params: bytes = b"") -> bytes:
    """What a host sends (used by tests and the twin's own checks)."""
    body = bytes((servo_id, len(params) + 2, instr)) + params
    return b"\xff\xff" + body + bytes((checksum(body),))


def encode_sign_magnitude(value: int, sign_bit: int) -> int:
    """`value` with its sign in `sign_bit` and its magnitude below (Feetech's encoding)."""
    return (-value | (1 << sign_bit)) if value < 0 else value


def decode_sign_magnitude(raw: int, sign_bit: int) -> int:
    """The inverse of `encode_sign_magnitude`."""
    return -(raw & ~(1 << sign_bit)) if raw & (1 << sign_bit) else raw


class ServoRegisters:
    """One servo's memory: 256 bytes read and written as the protocol addresses them. `on_write`
    is told each written range (address, length) after the bytes changed; `on_read` is asked to
    refresh the present values before a read (the servo samples its sensors)."""

    def __init__(self, servo_id: int) -> None:
        self.mem = bytearray(256)
        self.on_write: Callable[[int, int], None] = lambda addr, n: None
        self.on_read: Callable[[], None] = lambda: None
        self.error = 0  # the status error byte this servo reports (ERR_* bits)
        self.set("Model_Number", STS3215_MODEL)
        self.set("Firmware_Major_Version", 3)
        self.set("Firmware_Minor_Version", 10)
        self.set("ID", servo_id)
        self.set("Response_Status_Level", 1)
        self.set("Max_Temperature_Limit", 70)
        self.set("Max_Voltage_Limit", 140)
        self.set("Min_Voltage_Limit", 40)
        self.set("Max_Torque_Limit", 1000)
        self.set("Torque_Limit", 1000)
        self.set("Present_Voltage", 120)  # 0.1 V
        self.set("Present_Temperature", 30)  # deg C

    @property
    def id(self) -> int:
        """The servo's bus id (register ID: a write moves it, as on a real servo)."""
        return self.mem[5]

    def get(self, name: str) -> int:
        """A register by LeRobot's name, as the raw unsigned integer."""
        addr, n = REG[name]
        return int.from_bytes(self.mem[addr : addr + n], "little")

    def set(self, name: str, value: int) -> None:
        """Set a register by name without telling `on_write` (the servo's own updates)."""
        addr, n = REG[name]
        self.mem[addr : addr + n] = int(value & ((1 << (8 * n)) - 1)).to_bytes(n, "little")

    def read(self, addr: int, n: int) -> bytes:
        self.on_read()
        return bytes(self.mem[addr : addr + n])

    def write(self, addr: int, data: bytes) -> None:
        if addr + len(data) > 256:
            data = data[: 256 - addr]
        self.mem[addr : addr + len(data)] = data
        self.on_write(addr, len(data))


class ServoBus:
    """Servos on one half-duplex line: `feed()` takes the host's bytes and returns the answers.
    `malformed` counts packets dropped for a bad checksum or an impossible length."""

    MAX_PACKET = 250

    def __init__(self, servos: list[ServoRegisters]) -> None:
        self.servos = servos
        self._buf = bytearray()
        self.malformed = 0
        self.packets = 0
        self._pending: dict[int, tuple[int, bytes]] = {}  # REG_WRITE, run by ACTION
        # called after each SYNC READ is answered: (addr, n, the ids answered)
        self.on_sync_read: Callable[[int, int, list[int]], None] | None = None

    def _by_id(self, servo_id: int) -> ServoRegisters | None:
        for s in self.servos:
            if s.id == servo_id:
                return s
        return None

    def feed(self, data: bytes) -> bytes:
        """Parse the bytes that arrived; return every answer they call for, in order."""
        self._buf += data
        out = bytearray()
        while True:
            start = self._buf.find(b"\xff\xff")
            if start < 0:
                del self._buf[: max(0, len(self._buf) - 1)]  # keep a trailing 0xFF: half a header
                return bytes(out)
            del self._buf[:start]
            while len(self._buf) > 2 and self._buf[2] == 0xFF:  # FF FF FF ...: the header starts later
                del self._buf[0]
            if len(self._buf) < 4:
                return bytes(out)
            length = self._buf[3]
            if length < 2 or length > self.MAX_PACKET:
                self.malformed += 1
                del self._buf[:2]
                continue
            total = length + 4
            if len(self._buf) < total:
                return bytes(out)
            packet, self._buf = bytes(self._buf[:total]), self._buf[total:]
            if checksum(packet[2:-1]) != packet[-1]:
                self.malformed += 1
                continue
            self.packets += 1
            out += self._handle(packet[2], packet[4], packet[5:-1])

    def _answer(self, servo: ServoRegisters, instr: int, data: bytes = b"") -> bytes:
        # Response_Status_Level 0: only PING and READ are answered (the STS manual)
        if servo.get("Response_Status_Level") == 0 and instr not in (PING, READ):
            return b""
        return status_packet(servo.id, servo.error, data)

    def _handle(self, servo_id: int, instr: int, params: bytes) -> bytes:
        if instr == SYNC_WRITE:
            if len(params) < 2 or params[1] == 0:
                self.malformed += 1
                return b""
            addr, n = params[0], params[1]
            body = params[2:]
            for i in range(0, len(body) - n, n + 1):
                servo = self._by_id(body[i])
                if servo is not None:
                    servo.write(addr, body[i + 1 : i + 1 + n])
            return b""
        if instr == SYNC_READ:
            if len(params) < 2:
                self.malformed += 1
                return b""
            addr, n = params[0], params[1]
            out, answered = b"", []
            for sid in params[2:]:
                servo = self._by_id(sid)
                if servo is not None:
                    out += status_packet(servo.id, servo.error, servo.read(addr, n))
                    answered.append(servo.id)
            if self.on_sync_read is not None:
                self.on_sync_read(addr, n, answered)
            return out
        if instr == ACTION:
            for sid, (addr, data) in list(self._pending.items()):
                servo = self._by_id(sid)
                if servo is not None and (servo_id in (BROADCAST, sid)):
                    servo.write(addr, data)
                    del self._pending[sid]
            return b""
        targets = self.servos if servo_id == BROADCAST else [s for s in (self._by_id(servo_id),) if s]
        out = b""
        for servo in targets:
            if instr == PING:
                data = b""
            elif instr == READ and len(params) == 2:
                data = servo.read(params[0], params[1])
            elif instr == WRITE and len(params) >= 2:
                servo.write(params[0], params[1:])
                data = b""
            elif instr == REG_WRITE and len(params) >= 2:
                self._pending[servo.id] = (params[0], bytes(params[1:]))
                data = b""
            else:
                self.malformed += 1
                continue
            if servo_id != BROADCAST or instr == PING:  # a broadcast ping is answered by every servo
                out += self._answer(servo, instr, data)
        return out
