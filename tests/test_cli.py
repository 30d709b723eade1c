"""`robo-async`: the top-level help is written from the registry of commands and the benchmarks;
every command answers `--help` from the source that parses it; the one key=value parser refuses
unknown keys and bad values in one line."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from robo_async.cli import COMMANDS, main
from robo_async.commands.args import arg, help_text, parse, parse_known, usage
from robo_async.config import UserError

ROOT = Path(__file__).resolve().parents[1]
# one module per verb in robo_async/commands/, named after it (args.py is their parser)
VERBS = sorted(p.stem for p in (ROOT / "robo_async" / "commands").glob("*.py") if p.stem not in ("__init__", "args"))
HYDRA = {"train", "bc", "serve", "teleop"}  # commands that take Hydra overrides


def key_classes(module: object) -> list[type]:
    """The dataclasses a command module declares its keys with."""
    return [
        v
        for v in vars(module).values()
        if isinstance(v, type)
        and dataclasses.is_dataclass(v)
        and v.__module__ == module.__name__  # type: ignore[attr-defined]
        and all("help" in f.metadata for f in dataclasses.fields(v))
    ]


def test_every_command_module_is_registered_under_its_name() -> None:
    assert sorted(c.name for c in COMMANDS) == VERBS
    assert all(c.module == f"robo_async.commands.{c.name}" for c in COMMANDS)


def test_top_level_help_names_every_command_and_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    from robo_async.bench import load_all

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for verb in VERBS:
        assert f"\n  {verb} " in out, f"{verb} is not in robo-async --help"
        assert f"robo-async {verb}" in out, f"robo-async --help gives no usage of {verb}"
    for name in load_all():
        assert f"robo-async bench {name} " in out or out.count(f"robo-async bench {name}\n"), name


@pytest.mark.parametrize("verb", VERBS)
def test_each_command_answers_help_with_its_keys(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`--help` exits 0, starts nothing and lists every key the command parses (the config groups
    for the Hydra ones); it is never taken as an override."""
    module = importlib.import_module(f"robo_async.commands.{verb}")
    assert main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: robo-async ") or verb == "buffer", out[:200]
    for cls in key_classes(module):
        for f in dataclasses.fields(cls):
            shown = f"<{f.metadata['metavar'] or f.name}>" if f.metadata["positional"] else f.metadata["key"] or f.name
            assert f"\n  {shown} " in out, f"{verb} --help does not list {shown} of {cls.__name__}"
    if verb in HYDRA:
        assert "config groups" in out and "task " in out and "reach" in out and "--cfg job" in out
    else:
        assert key_classes(module) or verb == "bench", f"{verb} declares no keys"
    assert main([verb, "-h"]) == 0


def test_buffer_subcommands_answer_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["buffer", "export", "/nowhere", "--help"]) == 0
    assert "usage: robo-async buffer export <run dir | store dir>" in capsys.readouterr().out


def test_bench_help_prints_the_benchmark_docstring(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "weight-push", "--help"]) == 0
    assert "robo-async bench weight-push [sizes_mb=" in capsys.readouterr().out


# -- the parser ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Probe:
    """Keys of a made-up command."""

    path: Path = arg(help="a directory", positional=True)
    source: Path = arg(help="where from", key="from")
    n: int = arg(3, help="a count")
    rate: float | None = arg(None, help="a rate")
    ids: tuple[int, ...] = arg((), help="some ids")
    fast: bool = arg(False, help="go fast")
    mode: Literal["a", "b"] = arg("a", help="a mode")


def test_keys_are_read_with_their_types() -> None:
    got = parse(Probe, ["d", "from=s", "n=4", "rate=0.5", "ids=[3,7]", "fast=true", "mode=b"], "probe")
    assert got == Probe(path=Path("d"), source=Path("s"), n=4, rate=0.5, ids=(3, 7), fast=True, mode="b")
    assert parse(Probe, ["d", "from=s", "rate=null", "ids=1,2"], "probe") == Probe(
        path=Path("d"), source=Path("s"), ids=(1, 2)
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["d", "from=s", "nn=4", "x=1"], "probe: unknown keys nn=, x=; keys: <path>, from=, n=, rate="),
        (["d", "from=s", "n=four"], "probe: n='four': give an integer"),
        (["d", "from=s", "fast=maybe"], "probe: fast='maybe': give true or false"),
        (["d", "from=s", "mode=c"], "probe: mode='c': give one of a, b"),
        (["d"], "probe needs from=<path>: where from"),
        (["from=s"], "probe needs <path>: a directory"),
        (["d", "e", "from=s"], "probe: unknown key e;"),
    ],
)
def test_unknown_keys_and_bad_values_are_one_line_naming_them(argv: list[str], message: str) -> None:
    with pytest.raises(UserError) as e:
        parse(Probe, argv, "probe")
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_other_words_are_left_for_hydra_where_asked() -> None:
    got, rest = parse_known(Probe, ["d", "from=s", "task=push", "+x=1", "n=2"], "probe")
    assert got.n == 2 and rest == ["task=push", "+x=1"]


def test_help_is_written_from_the_dataclass() -> None:
    assert usage(Probe, "probe") == (
        "robo-async probe <path> from=<path> [n=3] [rate=<float>] [ids=<int,...>] [fast=false] [mode=a]"
    )
    text = help_text(Probe, "probe", "Does things.")
    assert "\n  n       int      3         a count" in text and "Does things." in text
