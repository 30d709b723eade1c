"""`robo-async twin so101`: a protocol-level twin of an SO-101's motor bus on pseudo-terminals
(`<dir>/follower.tty`, `<dir>/leader.tty`): Feetech STS3215 servos that LeRobot's own
`so101_follower` / `so101_leader` drive unchanged, each backed by a joint of our MuJoCo SO-101,
with the calibration files `lerobot-calibrate` would write. It prints the robot.* / teleop.*
overrides to use and runs until Ctrl-C; `<dir>/twin.json` describes it (ports, control socket)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from robo_async.commands.args import arg, help_text, parse, usage, wants_help


@dataclass(frozen=True, kw_only=True)
class TwinArgs:
    """The keys of `robo-async twin`."""

    robot: Literal["so101"] = arg(help="the robot to twin", positional=True)
    dir: Path | None = arg(
        None, metavar="dir", help="where its ttys, calibration and twin.json go (default: a new temp dir)"
    )
    leader: bool = arg(False, help="a leader arm too (teleop=so101_leader)")
    camera: bool = arg(False, help="the follower's front view on LeRobot's zmq camera type")
    seed: int = arg(0, help="where the servo horns sit (the homing offsets)")


def main(argv: list[str]) -> int:
    """Run the twin until Ctrl-C."""
    if wants_help(argv):
        print(help_text(TwinArgs, "twin", __doc__))
        return 0
    opts = parse(TwinArgs, argv, "twin")
    from hardware.twin.server import run_twin

    return run_twin(opts.dir, leader=opts.leader, seed=opts.seed, camera=opts.camera)


def usage_lines() -> str:
    """This command's usage, for `robo-async --help`."""
    return usage(TwinArgs, "twin")
