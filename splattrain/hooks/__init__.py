"""Hooks: the base class, dispatch, and the built-in hooks."""

from . import checkpoint_hook, log_hook  # noqa: F401  (register the built-in hooks)
from .base import HOOK_POINTS, Hook, Priority, get_priority
from .checkpoint_hook import CheckPointHook
from .dispatch import HookDispatcher, HookError
from .log_hook import LogHook

__all__ = ["HOOK_POINTS", "CheckPointHook", "Hook", "HookDispatcher", "HookError", "LogHook", "Priority", "get_priority"]
