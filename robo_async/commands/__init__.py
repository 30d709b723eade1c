"""The commands of `robo-async`, one module per verb, named after it (`robo-async keys` is
`keys.py`). Each has `main(argv) -> int`, `SUMMARY` (one line) and `usage()` (its usage lines),
and answers `--help` from the same source that parses it: a frozen dataclass of its keys read by
`args.py` (key=value commands), or Hydra's config groups (train, bc, serve, teleop's overrides).
`robo_async/cli.py` dispatches to them from its registry. This folder is the top floor: nothing
below imports it (tests/test_rooms.py)."""
