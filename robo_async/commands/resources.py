"""`robo-async resources`: what is here (serial buses, cameras, GPUs, inventory robots and
teleops, simulators), its health, and who holds it. `ray=true` prints the `ray start
--resources=...` line for this node; `fleet=true` shows the Ray cluster's leases and queues."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from robo_async.commands.args import arg, help_text, parse, usage, wants_help
from robo_async.config import UserError


@dataclass(frozen=True, kw_only=True)
class ResourcesArgs:
    """The keys of `robo-async resources`."""

    inventory: Path | None = arg(
        None, metavar="robots.yaml", help="an inventory file of robots and teleops (robots.yaml)"
    )
    sims: tuple[str, ...] = arg(("reach:1",), help="simulators to offer, task:count, e.g. reach:4,push:2")
    ray: bool = arg(False, help="print the `ray start --resources=...` line for this node")
    fleet: bool = arg(False, help="first the Ray cluster's leases: who holds which robot, who waits")
    address: str = arg("auto", metavar="ray head", help="the Ray head (with fleet=true)")


def main(argv: list[str]) -> int:
    """Print the table of resources (and the fleet's leases, the ray line)."""
    from hal.leases import LeaseManager
    from hal.resources import InventoryError, discover

    if wants_help(argv):
        print(help_text(ResourcesArgs, "resources", __doc__))
        return 0
    opts = parse(ResourcesArgs, argv, "resources")
    sims: dict[str, int] = {}
    for part in opts.sims:
        task, _, n = part.partition(":")
        try:
            sims[task] = int(n or 1)
        except ValueError:
            raise UserError(f"resources: sims={part!r}: give task:count, e.g. reach:4") from None
    if opts.fleet:
        print_fleet(opts.address)
    try:
        found = discover(opts.inventory, sims)
    except InventoryError as e:
        raise UserError(str(e)) from None
    leases = LeaseManager()
    print(f"{'kind':<8}{'id':<36}{'where':<24}{'health':<28}holder")
    for r in found:
        h = leases.holder(r.id)
        holder = f"{h.get('job')} (pid {h.get('pid')}, since {h.get('since')})" if h else "-"
        print(f"{r.kind:<8}{r.id:<36}{r.where:<24}{r.health:<28}{holder}")
    print(f"leases in {leases.directory}")
    if opts.ray:
        import json

        robots = {r.id: 1 for r in found if r.kind in ("robot", "teleop", "camera") and r.health == "ok"}
        print(f"ray start --address=<head>:6379 --resources='{json.dumps(robots)}'")
    return 0


def print_fleet(address: str) -> None:
    """The leases of the Ray cluster at `address`: who holds which robot since when, who waits."""
    import datetime as dt

    import ray

    from robo_async.launch.fleet import fleet_table, join_cluster

    try:
        join_cluster(address, logging_level="ERROR")
    except ConnectionError as e:
        raise UserError(str(e)) from None
    table = fleet_table()
    print(f"fleet leases (the lease authority of the Ray cluster at {address}):")
    if not table:
        print("  no leases held, nobody waiting")
    for rid, row in table.items():
        since = dt.datetime.fromtimestamp(row["since"]).isoformat(timespec="seconds") if row["since"] else "-"
        print(
            f"  {rid:<36}held by {row['holder'] or '-'} since {since}; waiting: {', '.join(row['waiting']) or 'nobody'}"
        )
    ray.shutdown()


def usage_lines() -> str:
    """This command's usage, for `robo-async --help`."""
    return usage(ResourcesArgs, "resources")
