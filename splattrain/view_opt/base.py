"""The protocol of a per-view correction: trainable parameters, one per training view, with their
own optimizer and learning rate, saved in checkpoints."""

from __future__ import annotations

from typing import Dict, List, Optional

import torch

from ..cameras import Camera


class ViewCorrection(torch.nn.Module):
    """Base class of appearance models (``APPEARANCE``) and pose refinements (``POSE_OPT``).

    Built from the config section (``appearance: {type, **options}`` / ``pose_opt: {...}``) with
    ``n_views`` (training views, indexed like ``batch["image_id"]``) added. Zero-initialised
    so that training starts from the data as given. The trainer steps :meth:`make_optimizer`'s
    optimizer after the Gaussians' and decays its learning rate to ``lr_final`` at the last step.
    Until ``start`` (a fraction of the run's steps), or to step ``start_step`` where that is set
    (a step, the same however long the run), the correction is not updated and not applied: the
    scene takes shape from the data as given first. After step ``stop_step`` (where set) it is
    applied as learned but no longer updated. Test views get no correction. The trainer calls
    :meth:`setup` once before training and :meth:`after_update` after each optimizer step.
    """

    def __init__(self, n_views: int, lr: float, lr_final: float, weight_decay: float = 0.0, start: float = 0.0,
                 start_step: Optional[int] = None, stop_step: Optional[int] = None) -> None:
        super().__init__()
        from ..errors import ConfigError

        if not 0.0 <= start < 1.0:
            raise ConfigError(f"{type(self).__name__} start is {start}: use a fraction of the run in [0, 1)")
        for key, value in (("start_step", start_step), ("stop_step", stop_step)):
            if value is not None and (type(value) is not int or value < 0):
                raise ConfigError(f"{type(self).__name__} {key} is {value!r}: use a step >= 0, or null")
        if start_step is not None and stop_step is not None and stop_step <= start_step:
            raise ConfigError(f"{type(self).__name__} stop_step {stop_step} is not after start_step {start_step}")
        self.n_views = n_views
        self.lr, self.lr_final, self.weight_decay, self.start = lr, lr_final, weight_decay, start
        self.start_step, self.stop_step = start_step, stop_step

    def setup(self, cameras: List[Camera], points: torch.Tensor, scene_scale: float) -> None:
        """Called once after construction with the training cameras (indexed like ``image_id``),
        the initial Gaussian means [P,3] and the scene scale. Nothing by default."""

    def after_update(self) -> None:
        """Called after each optimizer step of this module (e.g. to constrain the parameters).
        Nothing by default."""

    def started(self, step: int, max_steps: int) -> bool:
        """Whether step ``step`` applies the correction: past ``start_step`` where that is set, else
        at or past ``start`` of the run."""
        if self.start_step is not None:
            return step > self.start_step
        return step >= self.start * max_steps

    def active(self, step: int, max_steps: int) -> bool:
        """Whether step ``step`` updates the correction: it has started and not passed ``stop_step``."""
        return self.started(step, max_steps) and (self.stop_step is None or step <= self.stop_step)

    def make_optimizer(self) -> torch.optim.Optimizer:
        """Adam over this module's parameters at ``lr`` with ``weight_decay`` (L2 towards zero)."""
        return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay, eps=1e-15)

    def lr_at(self, step: int, max_steps: int) -> float:
        """Exponential decay from ``lr`` at step 0 to ``lr_final`` at ``max_steps``."""
        if self.lr_final <= 0 or self.lr_final == self.lr:
            return self.lr
        return self.lr * (self.lr_final / self.lr) ** (min(step, max_steps) / max(1, max_steps))

    def regularization(self, view_ids: torch.Tensor) -> Optional[torch.Tensor]:
        """A penalty on the corrections of training views ``view_ids`` added to the step's loss
        (logged as ``loss/view_opt``), or None."""
        return None

    def report(self) -> Dict[str, float]:
        """Summary figures of what was learned (logged and written to results.json)."""
        return {}
