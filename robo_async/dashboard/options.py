"""`dashboard:` config section."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DashboardOptions:
    """`dashboard`: the live web page the launcher serves."""

    port: int | None = 0  # the live web page on 127.0.0.1 (0: any free port, printed; null: none); remote: ssh -L
