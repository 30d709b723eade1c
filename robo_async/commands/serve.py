"""`robo-async serve`: run a policy for edge actors (the train config's task, policy and algo say
which; `policy.path=` loads saved weights; `serve.weights=` follows a learner's pushes).

    robo-async serve task=reach policy=flow policy.path=runs/<bc run>/policy.safetensors
    robo-async train task=reach policy=flow actor.inference_server=tcp://127.0.0.1:5560 ...

Prints where it listens and, every `serve.summary_s`, requests, chunks/s, batch sizes and the
weights version; Ctrl-C stops it.
"""

from __future__ import annotations

import threading
import time

from omegaconf import OmegaConf

from robo_async.commands.args import hydra_help, wants_help
from robo_async.config import UserError, compose_config
from robo_async.launch.mirrors import ConfigError, checked
from robo_async.serve.config import ServeConfig
from robo_async.serve.options import ServeOptions
from robo_async.serve.server import PolicyServer
from robo_async.transport.options import TransportOptions

USAGE = (
    "usage: robo-async serve [overrides] [serve.port=5560] [policy.path=<weights>] [serve.weights=tcp://learner:<port>]"
)


def usage_lines() -> str:
    """This command's usage, for `robo-async --help`."""
    return USAGE.removeprefix("usage: ")


def main(argv: list[str]) -> int:
    """`robo-async serve [overrides]` until Ctrl-C, or `--help`."""
    if wants_help(argv):
        print(hydra_help(USAGE, __doc__))
        return 0
    return serve(argv)


def build_server(overrides: list[str]) -> PolicyServer:
    """The server a `robo-async serve` command line describes (opened, not yet serving)."""
    from robo_async.launch.builders import (
        PolicyArgs,
        acting_args,
        algo_of,
        make_actor_policy,
        task_args,
        task_spec,
        transport_keys,
    )

    cfg = compose_config(overrides)
    plain = OmegaConf.to_container(cfg, resolve=True)
    task = task_args(plain["task"], plain.get("robot"), plain.get("safety"))
    spec = task_spec(task)
    algo_name, algo_config = algo_of(plain["algo"])
    pol = acting_args(PolicyArgs.from_config(plain["policy"]), algo_name, algo_config)
    policy = make_actor_policy(pol, spec)
    s = checked(plain["serve"], ServeOptions, "serve")
    if s.max_batch < 1 or s.batch_window_ms < 0:
        raise ConfigError("serve.max_batch must be >= 1 and serve.batch_window_ms >= 0")
    t = checked(plain["transport"], TransportOptions, "transport")
    config = ServeConfig.from_options(s, t, keys_dir=transport_keys(t, 1), policy_name=pol.name)
    return PolicyServer(policy, spec, config).open()


def serve(overrides: list[str], stop: threading.Event | None = None) -> int:
    try:
        server = build_server(overrides)
    except (ConfigError, ValueError, KeyError, FileNotFoundError) as e:
        raise UserError(str(e).strip("'\"")) from None
    summary_s = float(compose_config(overrides).serve.summary_s)
    p = server.policy
    print(
        f"policy server: {p.architecture} (horizon {p.horizon}, weights v{p.version}) for {server.spec.name} "
        f"on {server.bound}"
        + (f", following {server.config.weights_address}" if server.config.weights_address else "")
        + "; Ctrl-C stops",
        flush=True,
    )
    print(f"  actors: robo-async train ... actor.inference_server={server.bound}", flush=True)
    stop = stop or threading.Event()
    server.start()
    last, last_chunks = time.monotonic(), 0
    try:
        while not stop.wait(min(summary_s, 1.0)) and server.alive():
            now = time.monotonic()
            if now - last >= summary_s:
                st = server.stats()
                rate = (st["chunks"] - last_chunks) / (now - last)
                last, last_chunks = now, st["chunks"]
                print(
                    f"  {st['requests']} requests, {rate:.1f} chunks/s, batches {st['batch_sizes']}, "
                    f"weights v{st['version']} ({st['weight_swaps']} swaps), malformed {st['malformed']}, "
                    f"refused {st['refused']}, errors {st['errors']}",
                    flush=True,
                )
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    if server.failure is not None:
        raise UserError(f"the policy server stopped: {server.failure}")
    print(f"policy server stopped: {server.stats()}", flush=True)
    return 0
