"""What the ranks agree on after each step's backward: skipping the update, and stopping on a
signal that reached any rank."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Any, Dict, List

from ..hooks.auto_checkpoint import AutoCheckpointHook

if TYPE_CHECKING:  # pragma: no cover
    from ..engine.trainer import DefaultTrainer


def agree_on_step(trainer: "DefaultTrainer", outputs: Dict[str, Any]) -> None:
    """Make ``outputs["skip_update"]`` and a pending stop signal the same on every rank.

    One small all-reduce (max) per step: the update is skipped when any rank's hooks skip it, and
    a signal that reached any rank is handed to every rank's :class:`AutoCheckpointHook`, so all
    ranks save together and stop after the same step (the hook acting on one rank alone would
    leave the others waiting). While ranks train together their signals are recorded here, not by
    the hook, and take effect at the next agreement.
    """
    ctx = trainer.dist
    if not ctx.enabled:
        return
    hooks = [hook for hook in trainer.hooks.hooks if isinstance(hook, AutoCheckpointHook)]
    if not ctx.signals_routed:
        _route_signals(ctx, hooks)
    local = max([ctx.pending_signal] + [hook.pending or 0 for hook in hooks])
    skip, signum = ctx.any_rank([int(bool(outputs.get("skip_update"))), local])
    outputs["skip_update"] = bool(skip)
    ctx.pending_signal = 0
    for hook in hooks:
        hook.pending = signum or None


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
