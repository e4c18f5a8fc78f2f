"""What the ranks agree on: after each step's backward, skipping the update and stopping on a
signal that reached any rank; after each step, the requests hooks made (stop, validate, save)."""

from __future__ import annotations

import signal
import threading
from typing import Any, List, Optional

from ..hooks.auto_checkpoint import AutoCheckpointHook
from ..hooks.base import Hook
from ..hooks.trainer_api import StepOutputs, Trainer


def agree_on_step(trainer: Trainer, outputs: StepOutputs) -> None:
    """Make ``outputs.skip_update`` and a pending stop signal the same on every rank.

    A signal that reached any rank travelled in this step's gradient bucket
    (:meth:`DistContext.sync_gradients`); it is handed to every rank's :class:`AutoCheckpointHook`,
    so all ranks save together and stop after the same step (the hook acting on one rank alone
    would leave the others waiting). While ranks train together their signals are recorded here,
    not by the hook, and take effect at the next exchange. The update is skipped when any rank's
    hooks skip it: that takes one small all-reduce (max), only when a hook that may decide from
    rank-local information implements ``after_backward`` (hooks deciding only from what every
    rank shares, the averaged losses and gradients, declare ``rank_consistent = True``).
    """
    ctx = trainer.dist
    if not ctx.enabled:
        return
    hooks = route_signals(trainer)
    if rank_local_deciders(trainer):
        outputs.skip_update = bool(ctx.any_rank([int(bool(outputs.skip_update))])[0])
    signum, ctx.agreed_signal = ctx.agreed_signal, 0
    for hook in hooks:
        hook.pending = signum or None


def route_signals(trainer: Trainer) -> List[AutoCheckpointHook]:
    """From now on record stop signals in the rank context (for the next exchange) instead of
    letting each rank's :class:`AutoCheckpointHook` act alone; a signal a hook caught before goes
    to the next exchange too. Returns those hooks."""
    ctx = trainer.dist
    hooks = [hook for hook in trainer.hooks.hooks if isinstance(hook, AutoCheckpointHook)]
    if ctx.enabled and not ctx.signals_routed:
        _route_signals(ctx, hooks)
        ctx.pending_signal = max([ctx.pending_signal] + [hook.pending or 0 for hook in hooks])
        for hook in hooks:
            hook.pending = None
    return hooks


def agree_at_end(trainer: Trainer) -> None:
    """After the last step (and its validation): a signal that reached any rank since the last
    exchange reaches every rank's :class:`AutoCheckpointHook`, so all ranks stop alike."""
    ctx = trainer.dist
    if not ctx.enabled:
        return
    hooks = route_signals(trainer)
    signum = ctx.any_rank([ctx.pending_signal])[0]
    ctx.pending_signal = 0
    if signum:
        for hook in hooks:
            hook.pending = signum


def agree_on_requests(trainer: Trainer, stop: Optional[str], validation: bool,
                      checkpoint: bool) -> tuple[Optional[str], bool, bool]:
    """The hooks' requests of this step (the stop reason, validate, save) as any rank made them,
    so every rank acts alike: one small all-reduce per step on several ranks (and, on the step a
    stop is agreed, an exchange of the reasons), none in a single process."""
    ctx = trainer.dist
    if not ctx.enabled:
        return stop, validation, checkpoint
    agreed = ctx.any_rank([int(stop is not None), int(validation), int(checkpoint)])
    if agreed[0]:
        reasons = ctx.gather_objects(stop)
        stop = next(f"{reason} (rank {rank})" if rank else reason for rank, reason in enumerate(reasons) if reason)
    return stop, bool(agreed[1]), bool(agreed[2])


def rank_local_deciders(trainer: Trainer) -> List[str]:
    """Names of the hooks whose ``after_backward`` may decide differently on each rank."""
    return [type(hook).__name__ for hook in trainer.hooks.hooks
            if type(hook).after_backward is not Hook.after_backward and not getattr(hook, "rank_consistent", False)]


def _route_signals(ctx: Any, hooks: List[AutoCheckpointHook]) -> None:
    """Record the hooks' signals in ``ctx`` from now on (the hooks restore their predecessors'
    handlers at the end of the run, as they would have anyway)."""
    ctx.signals_routed = True
    if threading.current_thread() is not threading.main_thread():
        return

    def record(signum: int, frame: object) -> None:
        ctx.pending_signal = signum

    for signum in {s for hook in hooks for s in hook.signals}:
        signal.signal(signum, record)
