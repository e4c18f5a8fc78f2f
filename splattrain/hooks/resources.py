"""Resource hooks: freeing the accelerator cache and profiling a range of steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

import torch

from ..registry import HOOKS
from ..steps import Count, Steps
from .base import Hook, Priority


def empty_accelerator_cache(device: torch.device) -> bool:
    """Release cached accelerator memory (CUDA, MPS); returns False on CPU, where there is none."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        return True
    if device.type == "mps":
        torch.mps.empty_cache()
        return True
    return False


@HOOKS.register()
class EmptyCacheHook(Hook):
    """Frees the CUDA / MPS cache before and/or after validation, or every N steps (no-op on CPU).

    Args:
        before_val: free before each validation.
        after_val: free after each validation.
        interval: also free every N training steps (0: never).
    """

    priority = Priority.NORMAL

    def __init__(self, before_val: bool = False, after_val: bool = True, interval: Count = 0) -> None:
        super().__init__()
        self.free_before_val = before_val
        self.free_after_val = after_val
        self.interval = interval
        self.freed = 0

    def _free(self, trainer) -> None:
        if empty_accelerator_cache(trainer.device):
            self.freed += 1

    def before_val(self, trainer) -> None:
        if self.free_before_val:
            self._free(trainer)

    def after_val(self, trainer, metrics: Dict[str, Any]) -> None:
        if self.free_after_val:
            self._free(trainer)

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if self.every_n_steps(trainer, self.interval):
            self._free(trainer)


@HOOKS.register()
class ProfilerHook(Hook):
    """Runs ``torch.profiler`` over steps [start, start + steps), saves a trace, shows top operators.

    The Chrome trace goes to ``<run_dir>/profiler/trace_step_XXXXXX.json`` (open it in
    chrome://tracing or Perfetto); the console shows the ``top`` operators by self time.

    Args:
        start: first profiled step.
        steps: number of profiled steps.
        top: operators listed in the summary table.
        record_shapes / profile_memory / with_stack: passed to ``torch.profiler.profile``.
    """

    priority = Priority.VERY_HIGH

    def __init__(
        self,
        start: Steps = 10,
        steps: Count = 5,
        top: int = 15,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
    ) -> None:
        super().__init__()
        self.start = start
        self.stop = start + steps
        self.top = top
        self.options = {"record_shapes": record_shapes, "profile_memory": profile_memory, "with_stack": with_stack}
        self._profiler: Optional[torch.profiler.profile] = None
        self.trace_path: Optional[Path] = None
        self.summary = ""

    def before_train_iter(self, trainer, step: int, batch: Dict[str, Any]) -> None:
        if step == self.start and self._profiler is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if trainer.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._profiler = torch.profiler.profile(activities=activities, **self.options)
            self._profiler.__enter__()

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if self._profiler is not None and (step + 1 >= self.stop or self.is_last_step(trainer)):
            self._finish(trainer)

    def after_run(self, trainer) -> None:
        if self._profiler is not None:
            self._finish(trainer)

    def _finish(self, trainer) -> None:
        profiler, self._profiler = self._profiler, None
        profiler.__exit__(None, None, None)
        folder = trainer.run_dir / "profiler"
        folder.mkdir(parents=True, exist_ok=True)
        self.trace_path = folder / f"trace_step_{self.start:06d}.json"
        profiler.export_chrome_trace(str(self.trace_path))
        sort_by = "self_cuda_time_total" if trainer.device.type == "cuda" else "self_cpu_time_total"
        self.summary = profiler.key_averages().table(sort_by=sort_by, row_limit=self.top)
        trainer.console.info(f"profile of steps {self.start}..{trainer.step} (trace: {self.trace_path})")
        trainer.console.print(self.summary)
