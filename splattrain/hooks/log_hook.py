"""LogHook: progress and validation report on the console; scalars, grids and histograms to writers."""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Optional

import torch

from ..console import ProgressLogger, validation_table
from ..registry import HOOKS
from ..steps import Steps
from ..writers.grids import validation_grid
from . import state as state_values
from .base import Hook, Priority


def process_rss_bytes() -> Optional[int]:
    """Resident memory of this process, read from /proc (None where there is no /proc)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def memory_scalars(device: torch.device) -> Dict[str, float]:
    """memory/rss_mb and, on CUDA, memory/cuda_max_allocated_mb."""
    scalars: Dict[str, float] = {}
    rss = process_rss_bytes()
    if rss is not None:
        scalars["memory/rss_mb"] = rss / 2**20
    if device.type == "cuda":
        scalars["memory/cuda_max_allocated_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return scalars


def _shown_lr(lrs: Dict[str, float]) -> Dict[str, float]:
    """The learning rate the progress display shows, named by its group: the positions' when there are any."""
    group = "means" if "means" in lrs else next(iter(lrs), None)
    return {} if group is None else {f"lr/{group}": lrs[group]}


def _shown_validation(metrics: Dict[str, Any]) -> Dict[str, str]:
    """The last validation's PSNR and its step, for the progress display (``val psnr 20.80 @400``)."""
    psnr = metrics.get("psnr")
    return {} if psnr is None else {"val psnr": f"{psnr:.2f} @{metrics.get('step', '?')}"}


def split_line(step: int, metrics: Dict[str, Any], held_out: int) -> Optional[str]:
    """The validation line that sets the training views' PSNR beside the validation views' (the
    ``held_out`` views of ``data.val_split``; none: the test views): a growing gap is over-fitting."""
    train, val = metrics.get("train_psnr"), metrics.get("val_psnr")
    if train is None or val is None:
        return None
    views = f"{held_out} held-out training views" if held_out else "the test views"
    return f"step {step}: train psnr {train:.2f}  val psnr {val:.2f} ({views})  gap {train - val:+.2f} dB"


@HOOKS.register()
class LogHook(Hook):
    """Progress bar or lines, validation report; scalars, image grids and histograms to the writers.

    Every ``interval`` steps (the log interval, config ``default_hooks.logger.interval``)
    it reads the step's values back from the device in one copy (never in between: the EMA loss
    and other hooks' tensors in ``trainer.runtime_info`` stay on the device) and writes train/loss (the
    weighted sum), loss/<term> (each term, unweighted), train/ema_loss, train/num_gaussians, train/sh_degree,
    lr/<group> for every optimizer, time/step_ms, memory/* and whatever other hooks put in
    ``trainer.runtime_info``, and prints a plain progress line when the terminal is not
    interactive. The bar and the lines show ``ema_loss``, ``gaussians``, ``lr/means`` (the
    positions' learning rate; the first group's when there is no ``means``) and the last
    validation's PSNR with its step (``val psnr 20.80 @400``). At each validation it writes
    val/psnr, val/ssim, val/lpips, a grid image per view for the first ``num_val_images``
    views (render | ground truth | error heat map | depth), histograms of opacities and
    log-scales, and prints the validation table and the line setting the training views' PSNR
    beside the validation views' (``train psnr 31.02  val psnr 27.95 (6 held-out training views)
    gap +3.07 dB``; the validation views are those ``data.val_split`` holds out, else the test views).

    Args:
        interval: log every N steps.
        ema: weight of the previous EMA loss (EMA = ema * old + (1 - ema) * new).
        num_val_images: how many test views per validation go to the writers as grids.
        report_views: how many views (worst first) the validation table lists.
        error_scale: mean absolute error drawn white in the error heat map.
    """

    priority = Priority.BELOW_NORMAL

    def __init__(
        self,
        interval: Steps = 50,
        ema: float = 0.6,
        num_val_images: int = 4,
        report_views: int = 10,
        error_scale: float = 0.2,
    ) -> None:
        super().__init__()
        self.interval = interval
        self.ema = ema
        self.num_val_images = num_val_images
        self.report_views = report_views
        self.error_scale = error_scale
        self.ema_loss: Optional[float] = None  # as last read back from the device
        self._ema_tensor: Optional[torch.Tensor] = None
        self._fields: Optional[Dict[str, Any]] = None
        self.previous_val: Dict[str, float] = {}
        self._progress: Optional[ProgressLogger] = None
        self._step_started = 0.0
        self._timed_seconds = 0.0
        self._timed_steps = 0

    def before_train(self, trainer) -> None:
        self._progress = ProgressLogger(trainer.console, trainer.max_steps, start=trainer.step, interval=self.interval)
        self._progress.__enter__()

    def before_train_iter(self, trainer, step: int, batch: Dict[str, Any]) -> None:
        self._step_started = time.perf_counter()

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        self._timed_seconds += time.perf_counter() - self._step_started
        self._timed_steps += 1
        losses = {name: value.detach() for name, value in outputs["losses"].items()}
        self._update_ema(losses["loss"])
        due = self.every_n_steps(trainer, self.interval) or self.is_last_step(trainer)
        lrs = trainer.learning_rates()
        runtime_info = trainer.runtime_info  # what other hooks measured
        if due or self._fields is None:
            # The only device-to-host read of the step's values, once per log interval (and on
            # the first step, for the progress display): running values stay on the device.
            values = self._read({**{f"loss/{k}": v for k, v in losses.items()}, "ema": self._ema_tensor,
                                 **{k: v for k, v in runtime_info.items() if isinstance(v, torch.Tensor)}})
            self.ema_loss = values.pop("ema")
            self._fields = {"ema_loss": self.ema_loss, "gaussians": trainer.model.num_gaussians,
                            **_shown_lr(lrs), **_shown_validation(trainer.last_metrics)}
        if self._progress is not None:
            self._progress.update(step, self._fields)
        if due:
            scalars = {("train/loss" if k == "loss/loss" else k): v for k, v in values.items() if k.startswith("loss/")}
            scalars["train/ema_loss"] = self.ema_loss
            scalars["train/num_gaussians"] = trainer.model.num_gaussians
            scalars["train/sh_degree"] = outputs["sh_degree"]
            scalars.update({f"lr/{name}": lr for name, lr in lrs.items()})
            scalars["time/step_ms"] = 1000.0 * self._timed_seconds / max(1, self._timed_steps)
            scalars.update(memory_scalars(trainer.device))
            scalars.update({k: v for k, v in runtime_info.items() if isinstance(v, (int, float))})
            scalars.update({k: v for k, v in values.items() if not k.startswith("loss/")})
            self._timed_seconds, self._timed_steps = 0.0, 0
            trainer.writers.write_scalars(scalars, step)

    def on_pause(self, trainer, paused: bool) -> None:
        """The progress bar says "paused" (ETA and rate leave the paused time out)."""
        if self._progress is not None:
            self._progress.set_paused(paused, trainer.step)

    def _update_ema(self, loss: torch.Tensor) -> None:
        """EMA = ema * old + (1 - ema) * new, on the loss's device (no host read)."""
        if self._ema_tensor is None:
            self._ema_tensor = loss.float().clone() if self.ema_loss is None else \
                torch.full((), self.ema_loss, dtype=torch.float32, device=loss.device)  # restored from a checkpoint
            if self.ema_loss is None:
                return
        self._ema_tensor.mul_(self.ema).add_(loss.float(), alpha=1.0 - self.ema)

    @staticmethod
    def _read(tensors: Dict[str, torch.Tensor]) -> Dict[str, float]:
        """Every value in one device-to-host copy."""
        if not tensors:
            return {}
        stacked = torch.stack([t.detach().reshape(()).to(torch.float64 if t.device.type != "mps" else torch.float32)
                               for t in tensors.values()])
        return dict(zip(tensors, stacked.tolist()))

    def after_val_iter(self, trainer, index: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        if index >= self.num_val_images or not len(trainer.writers):
            return
        render = outputs["render"]
        depth = render.depth[0].detach().cpu().numpy() if render.depth is not None else None
        grid = validation_grid(
            render.rgb[0].detach().cpu().numpy(),
            batch["image"][0].detach().cpu().numpy(),
            depth,
            render.alpha[0].detach().cpu().numpy(),
            self.error_scale,
        )
        trainer.writers.write_image(f"val/{batch['camera'][0].name}", grid, trainer.step)

    def after_val(self, trainer, metrics: Dict[str, Any]) -> None:
        mean = {k: v for k, v in metrics.items() if k != "step" and v is not None}
        trainer.writers.write_scalars({f"val/{k}": v for k, v in mean.items()}, trainer.step)
        if len(trainer.writers):
            histograms = {"gaussians/opacity": trainer.model.opacities, "gaussians/log_scale": trainer.model.params["scales"]}
            for tag, values in histograms.items():
                trainer.writers.write_histogram(tag, values.detach().flatten().cpu().numpy(), trainer.step)
        trainer.writers.flush()
        trainer.console.print(
            validation_table(trainer.step, trainer.val_per_view, mean, self.previous_val, self.report_views)
        )
        line = split_line(trainer.step, metrics, len(trainer.data.val_frames))
        if line is not None:
            trainer.console.info(line)
        self.previous_val = mean
        if self._progress is not None and self._fields is not None:  # the bar shows this validation, the last one too
            self._fields.update(_shown_validation(metrics))
            self._progress.refresh(trainer.step, self._fields)

    def after_train(self, trainer) -> None:
        self._close()

    def after_run(self, trainer) -> None:
        self._close()

    def _close(self) -> None:
        if self._progress is not None:
            self._progress.__exit__(None, None, None)
            self._progress = None

    def state_dict(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {}
        if self._ema_tensor is not None:  # read back at checkpoints only
            self.ema_loss = float(self._ema_tensor)
        if self.ema_loss is not None:
            state["ema_loss"] = self.ema_loss
        if self.previous_val:
            state["previous_val"] = dict(self.previous_val)
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.ema_loss = state_values.number(state, "ema_loss", None, optional=True)
        self._ema_tensor = None
        self.previous_val = state_values.number_map(state, "previous_val", {})
