"""No source file over 400 lines unless it holds one idea that does not part (issue 38, item 3).

Every Python file of the repository outside `tests/` (tracked, or new and not ignored) is counted;
one over LIMIT lines must be on ALLOWED with the one idea it holds. A big file is cut where its ideas
part (a class from its helpers, one side of a protocol from the other), not at a line count. The list
stays honest: an entry whose file is now within the limit, or gone, fails too, so it is taken off.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 400

# path -> the one idea it holds (why it stays whole); empty: every source file is within the limit
ALLOWED: dict[str, str] = {}


def source_files() -> list[str]:
    """The repository's Python files outside tests/, tracked or new (not ignored), relative paths."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the source files cannot be listed")
    return sorted(p for p in out.splitlines() if not p.startswith("tests/") and (ROOT / p).is_file())


def lines(path: str) -> int:
    return len((ROOT / path).read_text(encoding="utf-8").splitlines())


def too_long(files: list[str], allowed: dict[str, str]) -> list[str]:
    """Files over LIMIT lines not on `allowed`, as 'path: N lines'."""
    return [f"{p}: {n} lines" for p in files if (n := lines(p)) > LIMIT and p not in allowed]


def stale(files: list[str], allowed: dict[str, str]) -> list[str]:
    """Entries of `allowed` whose file is gone or within LIMIT lines."""
    present = set(files)
    out = []
    for p in sorted(allowed):
        if p not in present:
            out.append(f"{p}: gone")
        elif (n := lines(p)) <= LIMIT:
            out.append(f"{p}: {n} lines, within {LIMIT}")
    return out


def test_no_source_file_over_the_limit_unless_allowed() -> None:
    files = source_files()
    assert len(files) > 100  # the listing found the code
    wrong = too_long(files, ALLOWED)
    assert not wrong, (
        f"source files over {LIMIT} lines: cut each where its ideas part, or, if it holds one idea that "
        f"does not part, add it to ALLOWED in tests/test_file_sizes.py with that idea:\n" + "\n".join(wrong)
    )


def test_the_allow_list_names_only_files_over_the_limit() -> None:
    wrong = stale(source_files(), ALLOWED)
    assert not wrong, "take these off ALLOWED in tests/test_file_sizes.py:\n" + "\n".join(wrong)


def test_every_allowed_file_says_why() -> None:
    assert all(why.strip() for why in ALLOWED.values())
    assert all(len(why.splitlines()) == 1 for why in ALLOWED.values())


def test_the_checks_catch_a_long_file_and_a_stale_entry(tmp_path: Path) -> None:
    files = source_files()
    short = next(p for p in files if lines(p) <= LIMIT)
    long = str(tmp_path / "long.py")  # absolute: `lines` reads it where it is
    Path(long).write_text("x = 1\n" * (LIMIT + 1))
    assert too_long([long], {}) == [f"{long}: {lines(long)} lines"]
    assert too_long([long], {long: "one idea"}) == []
    assert stale([short], {short: "one idea"}) == [f"{short}: {lines(short)} lines, within {LIMIT}"]
    assert stale([], {"robo_async/gone.py": "one idea"}) == ["robo_async/gone.py: gone"]
