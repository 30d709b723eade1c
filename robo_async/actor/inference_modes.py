"""Which inference mode a run uses: the one vocabulary of modes (`INFERENCE_MODES`: each mode's
schedule merge and whether it forwards the state, or `inline`), the replanning rules (`REPLAN`), and
the one rule for `actor.inference=auto` and for refusing a mode a run cannot use
(`choose_inference`, `InferenceModeError`). The engine that runs a mode is `actor/inference.py`.
"""

from __future__ import annotations

from robo_async.actor.options import InferenceMode, Replan

REPLAN = tuple(Replan)  # when (and about which tick) the next chunk is asked for (`options.Replan`)
# The one vocabulary of inference modes (`actor.inference`): mode -> (schedule merge mode, forward
# the state), or None for `inline`: the policy runs on the control thread, a chunk at a time, each
# executed whole before the next is asked for (zero-latency sync), a sim-only speed mode (as-fast-as-possible
# simulators, where a tick has no wall-clock meaning).
INFERENCE_MODES: dict[InferenceMode, tuple[str, bool] | None] = {
    InferenceMode.inline: None,
    InferenceMode.sync: ("sync", False),
    InferenceMode.sync_bounded: ("sync_bounded", False),
    InferenceMode.async_naive: ("drop_stale", False),
    InferenceMode.async_forward: ("drop_stale", True),
    InferenceMode.async_forward_blend: ("blend", True),
    InferenceMode.async_forward_rtc: ("rtc", True),
}
SYNC = ("sync", "sync_bounded")  # modes that ask about each tick's own observation and wait for the answer
# sync_bounded waits at most this share of a control period (then the robot holds; a late answer starts when it
# lands): a one-step policy's inference (~1 ms for an MLP) is asked about the tick it acts on, as SERL's loop does,
# where async_forward would act a tick late from a forwarded state that the critics never trained on
SYNC_BOUND = 0.25
PURPOSES = ("train", "evaluate")  # what the acting is for: what `auto` picks (see choose_inference)


class InferenceModeError(ValueError):
    """An inference mode this run cannot use; one line naming it and what to use instead."""


def choose_inference(
    requested: str | None,
    *,
    purpose: str,
    horizon: int | None = None,
    robot: str | None = None,
    realtime: bool = False,
    server: str | None = None,
) -> InferenceMode:
    """The one decision of `actor.inference` (train, eval, bc, the benchmarks' callers).

    `requested`: `auto` (or None) or one of INFERENCE_MODES; `robot`: the real robot's type (None:
    a simulator); `realtime`: the loop keeps wall-clock time on a simulator (a real-time sim, or
    `robo-async bc` showing its chunk policy as it would run); `server`: the policy server's
    address (`actor.inference_server`), if the policy runs there; `horizon`: actions per chunk
    (None: not known, decided as for a chunk policy).

    The rule:
    - a named mode is used as asked, except `inline`, which runs the policy on the control thread
      (a sim-only speed mode: the loop waits on every inference): refused on a real robot and with
      a server (the loop would wait on the network);
    - `auto` on an as-fast-as-possible simulator (no robot, not real time, no server): `inline` for
      training (any policy: acting is a data source there) and for evaluating a one-step policy
      (horizon 1); evaluating a chunk policy: `async_forward_rtc` (it is judged as it will run);
    - `auto` anywhere else (a real robot, real time, a server): a one-step policy without a server,
      `sync_bounded` (asked about each tick's own observation, waited for up to `SYNC_BOUND` of a
      period); otherwise inference beside the loop, `async_forward` for training, `async_forward_rtc`
      (real-time chunking) for evaluation.

    Returns the resolved mode (`auto` decided). Raises InferenceModeError (a ValueError) for an
    unknown mode or a refused `inline`."""
    if purpose not in PURPOSES:
        raise ValueError(f"purpose '{purpose}' unknown; one of {PURPOSES}")
    mode = "auto" if requested is None else requested
    if mode != "auto" and mode not in INFERENCE_MODES:
        raise InferenceModeError(f"actor.inference '{mode}' unknown; use auto or one of {list(INFERENCE_MODES)}")
    if mode == "auto":
        as_fast_sim = robot is None and not realtime and not server
        if as_fast_sim and (purpose == "train" or horizon == 1):
            return InferenceMode.inline
        if horizon == 1 and not server:
            return InferenceMode.sync_bounded
        return InferenceMode.async_forward if purpose == "train" else InferenceMode.async_forward_rtc
    if mode == "inline" and server:
        raise InferenceModeError(
            f"actor.inference=inline would wait on the network on the control thread; with "
            f"actor.inference_server={server} use an asynchronous mode (auto, async_forward, ...)"
        )
    if mode == "inline" and robot is not None:
        raise InferenceModeError(
            f"actor.inference=inline runs the policy on the control thread, a sim-only speed "
            f"mode; robot {robot} needs an asynchronous mode (auto, async_forward, ...)"
        )
    return InferenceMode(mode)
