"""`robo-async <command> ...`: the dispatcher over the registry of commands (`COMMANDS`: name,
one-line summary, module in robo_async/commands/). `robo-async --help` is written from the
registry and the registered benchmarks; each command answers its own `--help`. Errors are one
line, `error: ...`, exit code 2."""

from __future__ import annotations

import importlib
import logging
import sys
from dataclasses import dataclass
from types import ModuleType

from robo_async.config import UserError


@dataclass(frozen=True)
class Command:
    """A `robo-async` command: its name, what it does in one line, and the module that runs it
    (`main(argv) -> int`, `usage_lines() -> str`)."""

    name: str
    summary: str
    module: str

    def load(self) -> ModuleType:
        """The command's module, imported."""
        return importlib.import_module(self.module)


COMMANDS: tuple[Command, ...] = (
    Command("train", "train a policy (Hydra overrides); resume= continues a run", "robo_async.commands.train"),
    Command("eval", "evaluate a checkpoint or policy directory on its robot", "robo_async.commands.eval"),
    Command("bc", "behaviour cloning of a chunk policy from demos, then an async evaluation", "robo_async.commands.bc"),
    Command("buffer", "replay stores: counts, LeRobot export/import, expert demos", "robo_async.commands.buffer"),
    Command("reward", "a success classifier on camera frames (a learned reward)", "robo_async.commands.reward"),
    Command("teleop", "drive a robot with a teleop, record labelled episodes", "robo_async.commands.teleop"),
    Command("serve", "the config's policy for edge actors without a GPU", "robo_async.commands.serve"),
    Command("keys", "CURVE key pairs: the learner's and one per actor id", "robo_async.commands.keys"),
    Command("twin", "a twin of an SO-101's servo bus on pseudo-terminals", "robo_async.commands.twin"),
    Command("resources", "robots, buses, cameras, GPUs, sims; who holds them", "robo_async.commands.resources"),
    Command("bench", "benchmarks: a table, then one JSON line of figures", "robo_async.commands.bench"),
)
BY_NAME = {c.name: c for c in COMMANDS}


def help_text() -> str:
    """`robo-async --help`: each command's summary and usage (the benchmarks' from their docstrings)."""
    lines = ["usage: robo-async <command> [key=value | override ...]   (robo-async <command> --help)", "", "commands:"]
    for c in COMMANDS:
        lines.append(f"  {c.name:<10} {c.summary}")
        lines += [f"      {u.strip()}" for u in c.load().usage_lines().splitlines() if u.strip()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the command `argv[0]` (default: the process's arguments) with the rest of `argv`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    import signal

    # Ctrl-C stops a run in order (final checkpoint), also when started from a process that
    # ignores SIGINT (the ignore would otherwise be inherited and the run could not be stopped)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if not argv or argv[0] in ("-h", "--help", "help"):
            print(help_text())
            return 0
        if argv[0] not in BY_NAME:
            raise UserError(f"unknown command '{argv[0]}'; commands: {', '.join(BY_NAME)} (robo-async --help)")
        return BY_NAME[argv[0]].load().main(argv[1:])
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
