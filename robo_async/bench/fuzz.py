"""`robo-async bench fuzz`: mutated wire messages against live receivers on loopback, each in a
process of its own: a learner (`learner_main`, a store on disk), a policy server (a flow policy)
and an actor's `WeightClient` under a hostile PUB. Per target, `messages` of each kind: a valid
message (the dataclasses through `encode`) given one or two mutations (header fields, keys, kind,
array specs with or without a data frame to fit, arrays added or left out, frames cut, grown,
flipped, dropped or 65,000 added, a header of garbage, deep nesting or past the cap); only those
this process's `decode` refuses are sent, so a target must drop each one. Each round ends with a
valid sentinel on the same socket (a batch stored, a hello answered, a status and weights taken):
then all before it was processed. Counted: messages, dropped (the target's own counter), crashes
(its process or receiving thread died, or an exception got past the checks into its last-resort
handler), the learner's rows beyond the sentinels' (`rows_stored`, must be 0). Last line: JSON.

The targets' processes and their drivers are in `bench.fuzz_targets`; here, the rounds sent to each
target and the report.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from robo_async.bench import emit, register
from robo_async.bench.fuzz_targets import ClientTarget, LearnerTarget, ServerTarget, Target
from robo_async.bench.mutate import Mutants
from robo_async.commands.args import arg
from robo_async.transport.wire import KINDS


def run_target(target: Callable[[], Target], mutants: Mutants, per_kind: int, round_size: int) -> dict[str, object]:
    """`per_kind` mutants of each kind to `target`, in rounds of about `round_size` messages, each
    generated first, then sent and ended by a sentinel (`seconds`: sending until it is through)."""
    total, sent, busy, gen, shown = per_kind * len(KINDS), 0, 0.0, 0.0, -1
    rounds = max(1, math.ceil(total / round_size))
    t = target()
    t.mutants = mutants
    try:
        for r in range(rounds):
            t0 = time.monotonic()
            batch = [
                (k, mutants.malformed(k))
                for _ in range(per_kind * (r + 1) // rounds - per_kind * r // rounds)
                for k in KINDS
            ]
            t1 = time.monotonic()
            for kind, frames in batch:
                t.send(frames, kind)
                sent += 1
            dropped = t.sentinel()
            gen, busy = gen + t1 - t0, busy + time.monotonic() - t1
            if sent * 10 // total > shown or r == rounds - 1:
                shown = sent * 10 // total
                print(
                    f"  {t.name:<13} {sent:>9,}/{total:,} sent, {dropped:>9,} dropped, {sent / busy:>7,.0f} msgs/s",
                    flush=True,
                )
    except ChildProcessError as e:
        t.died = str(e)
        print(f"  {t.name}: {e}", flush=True)
    row = t.close()
    return {
        "messages": sent,
        **row,
        "seconds": round(busy, 1),
        "msgs_per_s": round(sent / busy) if busy else 0,
        "generate_s": round(gen, 1),
    }


@dataclass(frozen=True, kw_only=True)
class FuzzKeys:
    """The keys of `robo-async bench fuzz`."""

    messages: int = arg(100_000, help="mutated messages of each kind sent to each target")
    seed: int = arg(0, help="seed of the mutations")
    round: int = arg(8000, help="messages between two sentinels (each round ends with a valid one)")


@register("fuzz", FuzzKeys)
def bench_fuzz(args: FuzzKeys) -> int:
    per_kind, seed = args.messages, args.seed
    round_size = args.round  # messages between two sentinels
    print(f"fuzz: {per_kind:,} mutated messages of each of {len(KINDS)} kinds per target, seed {seed}", flush=True)
    rows, mutants = {}, {}
    for i, target in enumerate((LearnerTarget, ServerTarget, ClientTarget)):
        mutants[target.name] = Mutants(seed, i)
        rows[target.name] = run_target(target, mutants[target.name], per_kind, round_size)
    print(f"\n{'target':<15}{'messages':>11}{'dropped':>11}{'crashes':>9}{'rows stored':>13}{'msgs/s':>9}")
    for name, r in rows.items():
        print(
            f"{name:<15}{r['messages']:>11,}{r['dropped']:>11,}{r['crashes']:>9}{r.get('rows_stored', '-'):>13}"
            f"{r['msgs_per_s']:>9,}"
        )
    gen = {k: sum(m.counts[k] for m in mutants.values()) for k in ("valid_mutants", "unnamed", "escapes")}
    reasons = sum((m.unnamed_reasons for m in mutants.values()), Counter[str]())
    print(
        f"mutants decode accepted (not sent): {gen['valid_mutants']:,}; refused by decode's last-resort wrapper "
        f"only: {gen['unnamed']:,}; other exceptions out of decode: {gen['escapes']:,}"
    )
    for why, n in reasons.most_common(5):
        print(f"  x{n:,}: {why}")
    out = {
        "messages": sum(int(r["messages"]) for r in rows.values()),  # type: ignore[call-overload]
        "crashes": sum(int(r["crashes"]) for r in rows.values()),  # type: ignore[call-overload]
        "rows_stored": rows["learner"].get("rows_stored"),
        "all_dropped": all(r["dropped"] == r["messages"] for r in rows.values()),
        "per_kind": per_kind,
        "seed": seed,
        **gen,
        "unnamed_reasons": dict(reasons),
        "targets": rows,
    }
    emit(out)
    return 0 if out["crashes"] == 0 and out["rows_stored"] == 0 and out["all_dropped"] else 1
