"""The trainer's validation: the test views scored (with an average a hook keeps swapped in), and
the held-out and training views' scores beside them. Part of :class:`~splattrain.engine.DefaultTrainer`."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import torch

from ..metrics import Evaluator, mean_metrics, psnr
from ..metrics.pose_alignment import aligned_psnr
from . import signals
from .run_state import RunState

#: Training views scored for ``train_psnr`` at most, when validation uses the test views.
TRAIN_VIEWS_SCORED = 8


class Validation:
    """:meth:`validate` and what it needs, over the trainer's attributes (assigned by the trainer)."""

    evaluator: Any
    state: RunState

    @torch.no_grad()
    def validate(self) -> Dict[str, Any]:
        """Render every test view, score it, and return the mean metrics (``psnr``, ``ssim``, ...:
        the test views'), with ``val_<metric>`` and ``train_psnr`` beside them (:meth:`_split_scores`)."""
        if self.evaluator is None:
            self.evaluator = self._evaluator()
        sh_degree = self.schedule.sh_degree_at(self.step)
        scored: List[tuple[int, Dict[str, Any]]] = []
        with self.shadow.for_validation(self.model.params):  # a kept average is what is validated
            self.call_hook("before_val")
            for index, batch in enumerate(self.data.test_batches()):
                if not self.dist.owns_view(index):  # several ranks share the test views
                    continue
                self.call_hook("before_val_iter", index, batch)
                render = self.renderer.render(self.model, batch["camera"], sh_degree, self.background)
                scores = self.evaluator(render.rgb, batch["image"], batch.get("mask"))
                if self.cfg.metrics.align_poses > 0:
                    scores["aligned_psnr"] = aligned_psnr(self.renderer, self.model, batch, sh_degree, self.background,
                                                          self.cfg.metrics.align_poses)
                scored.append((index, {"view": batch["camera"][0].name, **scores}))
                self.call_hook("after_val_iter", index, batch, {"render": render, "metrics": scores})
                self._act_on_signals(*signals.between_views(self.dist))
            per_view = self.dist.gather_views(scored)
            metrics = {"step": self.step, **mean_metrics(per_view)}
            metrics.update(self._split_scores(sh_degree, metrics))
        self.state.val_per_view = per_view
        self.state.last_metrics = metrics
        self.call_hook("after_val", metrics)
        self.writers.write_views(per_view, self.step)
        return metrics

    def _split_scores(self, sh_degree: int, test: Dict[str, Any]) -> Dict[str, Any]:
        """``val_<metric>`` of the views ``data.val_split`` holds out (without one, the test views'
        ``test`` scores) and ``train_psnr`` of as many training views (without a split, as many as
        test views up to :data:`TRAIN_VIEWS_SCORED`), spread over them, rendered with their learned
        view corrections."""
        data, evaluator = self.data, self.evaluator
        val = test
        if data.val_frames:
            val = mean_metrics(self.dist.gather_views([
                (index, evaluator(self.renderer.render(self.model, batch["camera"], sh_degree, self.background).rgb,
                                  batch["image"], batch.get("mask")))
                for index, batch in enumerate(data.val_batches()) if self.dist.owns_view(index)]))
        count = max(1, len(data.val_frames) or min(len(data.test_frames), TRAIN_VIEWS_SCORED))
        train = []
        for index, batch in enumerate(data.train_view_batches(count)):
            if self.dist.owns_view(index):
                render = self.renderer.render(self.model, self.view_opt.cameras(batch), sh_degree, self.background)
                train.append((index, {"psnr": psnr(self.view_opt.colors(render.rgb, batch), batch["image"],
                                                   batch.get("mask"))}))
        scores = {f"val_{key}": val.get(key) for key in ("psnr", "cc_psnr", "ssim", "lpips")}
        return {**scores, "train_psnr": mean_metrics(self.dist.gather_views(train))["psnr"]}

    def _evaluator(self, required: Sequence[Tuple[str, str]] = ()) -> Evaluator:
        metrics = self.cfg.metrics
        return Evaluator(metrics.lpips, metrics.lpips_net, self.device, self.console.warning, metrics.lpips_weights,
                         metrics.lpips_download, self.console.transfer, required)
