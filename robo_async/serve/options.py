"""`serve:` config section: `robo-async serve`, this config's policy for edge actors."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeOptions:
    """`serve`: the policy server's port, weight source and batching (actors use
    actor.inference_server=tcp://<host>:<port>)."""

    port: int = 5560  # bound on transport.host (beyond loopback: transport.keys, as for the learner)
    weights: str | None = None  # the learner's weight publisher (tcp://learner:<transport.weights_port>): hot swaps
    key_id: int = 0  # with keys: the actor key the server subscribes to the learner's weights with
    max_batch: int = 16  # requests per forward pass (actors' requests that arrive together)
    batch_window_ms: float = 2.0  # after a request, wait this long for others to batch with it
    summary_s: float = 10.0  # a one-line summary this often
