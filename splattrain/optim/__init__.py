"""Optimisation: one Adam per parameter group (the compiled :class:`GaussianAdam` on the CPU),
learning-rate and momentum schedules, and what the trainer calls each step."""

from .optimizers import (
    GROUPS, ParamScheduler, build_optimizers, build_schedulers, build_schedules, clear_grads, schedule_specs,
    step_optimizers,
)
from .schedules import Schedule, build_schedule

__all__ = [
    "GROUPS", "ParamScheduler", "Schedule", "build_optimizers", "build_schedule", "build_schedulers",
    "build_schedules", "clear_grads", "schedule_specs", "step_optimizers",
]
