"""LogHook: progress and validation report on the console; scalars, grids and histograms to writers."""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

import torch

from ..console import ProgressLogger, validation_table
from ..errors import ConfigError
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
    """The last validation's test-view PSNR and its step, for the progress display (``test psnr 20.80 @400``)."""
    psnr = metrics.get("psnr")
    return {} if psnr is None else {"test psnr": f"{psnr:.2f} @{metrics.get('step', '?')}"}


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
    it reads the step's values back from the device in one copy (never in between: the engine's
    loss average and other hooks' tensors in ``trainer.runtime_info`` stay on the device) and writes
    train/loss (the weighted sum), loss/<term> (each term, unweighted), train/ema_loss (the engine's
    ``trainer.loss_average``), train/num_gaussians, train/sh_degree, lr/<group> for every optimizer,
    time/step_ms (the mean of ``trainer.clock``'s step times since the last log), memory/* and whatever other hooks put in
    ``trainer.runtime_info``, and prints a plain progress line when the terminal is not
    interactive. The bar and the lines show ``ema_loss``, ``gaussians``, ``lr/means`` (the
    positions' learning rate; the first group's when there is no ``means``) and the last
    validation's test-view PSNR with its step (``test psnr 20.80 @400``). At each validation it writes
    val/psnr, val/ssim, val/lpips, a grid image per view for the first ``num_val_images``
    views (render | ground truth | error heat map | depth), histograms of opacities and
    log-scales, and prints the validation table and the line setting the training views' PSNR
    beside the validation views' (``train psnr 31.02  val psnr 27.95 (6 held-out training views)
    gap +3.07 dB``; the validation views are those ``data.val_split`` holds out, else the test views).

    Args:
        interval: log every N steps.
        ema: no longer an option: the loss average is the engine's, weighted by ``trainer.loss_ema``;
            a config that sets it is refused, naming that key.
        num_val_images: how many test views per validation go to the writers as grids.
        report_views: how many views (worst first) the validation table lists.
        error_scale: mean absolute error drawn white in the error heat map.
    """

    priority = Priority.BELOW_NORMAL

    def __init__(
        self,
        interval: Steps = 50,
        ema: Optional[float] = None,
        num_val_images: int = 4,
        report_views: int = 10,
        error_scale: float = 0.2,
    ) -> None:
        super().__init__()
        if ema is not None:
            raise ConfigError(f"LogHook ema {ema!r}: the loss average is the engine's, weighted by trainer.loss_ema; "
                              "set that instead")
        self.interval = interval
        self.num_val_images = num_val_images
        self.report_views = report_views
        self.error_scale = error_scale
        self.ema_loss: Optional[float] = None  # the engine's loss average, as last read back from the device
        self._fields: Optional[Dict[str, Any]] = None
        self.previous_val: Dict[str, float] = {}
        self._progress: Optional[ProgressLogger] = None
        self._logged_clock = (0, 0.0)  # trainer.clock's timed_steps and timed_seconds at the last log

    def before_train(self, trainer) -> None:
        self._progress = ProgressLogger(trainer.console, trainer.max_steps, start=trainer.step, interval=self.interval)
        self._progress.__enter__()

    def after_train_iter(self, trainer, step: int, batch: Dict[str, Any], outputs: Dict[str, Any]) -> None:
        losses = {name: value.detach() for name, value in outputs["losses"].items()}
        due = self.every_n_steps(trainer, self.interval) or self.is_last_step(trainer)
        lrs = trainer.learning_rates()
        runtime_info = trainer.runtime_info  # what other hooks measured
        if due or self._fields is None:
            # The only device-to-host read of the step's values, once per log interval (and on
            # the first step, for the progress display): running values stay on the device.
            average = trainer.loss_average
            values = self._read({**{f"loss/{k}": v for k, v in losses.items()},
                                 **({"ema": average} if average is not None else {}),
                                 **{k: v for k, v in runtime_info.items() if isinstance(v, torch.Tensor)}})
            self.ema_loss = values.pop("ema", None)
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
            scalars["time/step_ms"] = self._mean_step_ms(trainer.clock)
            scalars.update(memory_scalars(trainer.device))
            scalars.update({k: v for k, v in runtime_info.items() if isinstance(v, (int, float))})
            scalars.update({k: v for k, v in values.items() if not k.startswith("loss/")})
            trainer.writers.write_scalars(scalars, step)

    def on_pause(self, trainer, paused: bool) -> None:
        """The progress bar says "paused" (ETA and rate leave the paused time out)."""
        if self._progress is not None:
            self._progress.set_paused(paused, trainer.step)

    def _mean_step_ms(self, clock: Any) -> float:
        """The mean of the engine's step times since the last log, in ms."""
        steps, seconds = self._logged_clock
        self._logged_clock = (clock.timed_steps, clock.timed_seconds)
        if clock.timed_steps < steps:  # the clock started again (a resume in the same process)
            steps, seconds = 0, 0.0
        return 1000.0 * (clock.timed_seconds - seconds) / max(1, clock.timed_steps - steps)

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
        state: Dict[str, Any] = {}  # the loss average is the engine's (checkpointed by it)
        if self.previous_val:
            state["previous_val"] = dict(self.previous_val)
        return state

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        # ``ema_loss``: older checkpoints kept the loss average here; checked, the engine reads it
        self.ema_loss = state_values.number(state, "ema_loss", None, optional=True)
        self.previous_val = state_values.number_map(state, "previous_val", {})
