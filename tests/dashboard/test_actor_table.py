"""The dashboard's actor table reads an actor's heartbeat figures by the names `ActorStats`
declares (plus the row's own keys), so a renamed or dropped figure cannot leave a column blank
unnoticed. Read from the page itself."""

import re
from dataclasses import fields
from pathlib import Path

from robo_async.dashboard.server import PAGE
from robo_async.transport.stats import ActorStats

ROW_KEYS = {
    "env_steps",
    "policy_version",
    "episodes",
    "heard_s",
    "frames",
    "resource",
}  # Learner.actor_rows + the launcher


def test_every_actor_figure_the_page_reads_is_declared():
    page = Path(PAGE).read_text()
    script = page[page.index("#actors tbody") :]  # the actor table's rendering: `a` is one actor's row
    names = set(re.findall(r"\ba\.([A-Za-z_][A-Za-z0-9_]*)", script))
    declared = {f.name for f in fields(ActorStats)}
    assert names - ROW_KEYS, "the page reads no heartbeat figure: the pattern no longer matches it"
    assert names <= declared | ROW_KEYS, f"the page reads undeclared figures {sorted(names - declared - ROW_KEYS)}"
