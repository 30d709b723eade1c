"""The robot spec an actor's hello names and a policy server checks (`InferRequest.spec`,
`ChunkReply.spec`): `hal.spec.RobotSpec.signature()` as compact JSON, and one line naming how
two of them differ. Here, in the transport room, so the actor and the server share it without
importing each other."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Protocol


class HasSignature(Protocol):
    """A robot spec (`hal.spec.RobotSpec`): what matters for a chunk to fit, as a plain map."""

    def signature(self) -> Mapping[str, object]:
        """A plain, comparable summary of the robot (names, dims, limits, rate)."""
        ...


def spec_json(spec: HasSignature) -> str:
    """The robot spec a request's chunk must fit (hello), as compact JSON."""
    return json.dumps(spec.signature(), sort_keys=True, separators=(",", ":"))


def spec_difference(mine: str, theirs: str) -> str:
    """One line naming how two robot spec signatures differ (`mine`: the server's)."""
    try:
        a, b = json.loads(mine), json.loads(theirs)
    except ValueError:
        return "the actor's robot spec is not valid JSON"
    diff = [f"{k}: server {a.get(k)!r}, actor {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return "; ".join(diff)[:600]
