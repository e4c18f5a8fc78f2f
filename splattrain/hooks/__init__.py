"""Hooks: the base class, dispatch, and the built-in hooks."""

from .auto_checkpoint import AutoCheckpointHook, RunInterrupted
from .base import HOOK_POINTS, Hook, Priority, get_priority
from .checkpoint_hook import CheckPointHook
from .contribution_prune import ContributionPruneHook
from .dispatch import HookDispatcher, HookError
from .early_stopping import EarlyStoppingHook
from .ema import EMAHook
from .grad_clip import GradClipHook
from .invalid_loss import CheckInvalidLossHook, InvalidLossError
from .iter_timer import IterTimerHook
from .log_hook import LogHook
from .memory_budget import MemoryBudgetHook
from . import specs  # noqa: F401  (how hook sections are checked)
from .resources import EmptyCacheHook, ProfilerHook
from ..protocol import RunSchedule, StepOutputs, Trainer
from .viewer_hook import ViewerHook

__all__ = [
    "HOOK_POINTS",
    "AutoCheckpointHook",
    "CheckInvalidLossHook",
    "CheckPointHook",
    "ContributionPruneHook",
    "EarlyStoppingHook",
    "EMAHook",
    "GradClipHook",
    "Hook",
    "HookDispatcher",
    "HookError",
    "InvalidLossError",
    "IterTimerHook",
    "LogHook",
    "EmptyCacheHook",
    "MemoryBudgetHook",
    "ProfilerHook",
    "RunSchedule",
    "ViewerHook",
    "Priority",
    "RunInterrupted",
    "StepOutputs",
    "Trainer",
    "get_priority",
]
