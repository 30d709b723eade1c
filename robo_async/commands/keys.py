"""`robo-async keys`: CURVE key pairs for encrypted, authenticated links: the learner's, one per
actor id, and the allow-list (`transport.keys=<dir>`). Existing keys are kept."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from robo_async.commands.args import arg, help_text, parse, usage, wants_help
from robo_async.config import UserError


@dataclass(frozen=True, kw_only=True)
class KeysArgs:
    """The keys of `robo-async keys`."""

    dir: Path = arg(metavar="keys dir", help="the keys directory (created; existing keys are kept)")
    actors: int = arg(1, help="actor ids 0..actors-1 (unless ids= is given)")
    ids: tuple[int, ...] = arg((), metavar="3,7", help="these actor ids instead, e.g. [3,7]")
    lanes: int = arg(1, help="the robots each actor steps (actor.envs <= lanes)")


def main(argv: list[str]) -> int:
    """Write the key files; print which machine needs which."""
    from robo_async.transport.curve import KeysError, create_keys

    if wants_help(argv):
        print(help_text(KeysArgs, "keys", __doc__))
        return 0
    opts = parse(KeysArgs, argv, "keys")
    ids = list(opts.ids) if opts.ids else list(range(opts.actors))
    if any(i < 0 for i in ids):
        raise UserError("keys: actor ids are >= 0")
    d = opts.dir
    try:
        written = create_keys(d, ids, opts.lanes)
    except KeysError as e:
        raise UserError(f"keys: {e}") from None
    print(
        f"{len(written)} key files written under {d} (existing ones kept); actor ids {ids}, each issued for "
        f"{opts.lanes} robot stream(s) (actor.envs <= {opts.lanes})"
    )
    print(f"  learner machine: {d}/learner.key_secret, {d}/learner.key and {d}/authorized/ (the allow-list)")
    print(f"  actor <id> machine: {d}/learner.key and {d}/actors/actor-<id>.key_secret, nothing else")
    print(f"  train with: robo-async train transport.keys={d} transport.host=0.0.0.0 ...")
    return 0


def usage_lines() -> str:
    """This command's usage, for `robo-async --help`."""
    return usage(KeysArgs, "keys")
