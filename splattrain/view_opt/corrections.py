"""The trainer's view corrections: the configured appearance model and pose refinement, their
optimizers, checkpoint state and report."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional

import torch
from torch import Tensor

from ..cameras import Camera
from ..errors import CheckpointError, ConfigError
from ..registry import APPEARANCE, POSE_OPT, Registry
from .base import ViewCorrection


def _build(registry: Registry, spec: Mapping[str, Any], where: str, n_views: int) -> Optional[ViewCorrection]:
    options = dict(spec)
    kind = str(options.pop("type", "none"))
    if kind == "none":  # off: options a config set for the type it replaces are left unused
        return None
    module = registry.build({"type": kind, **options}, where=where, n_views=n_views)
    if not isinstance(module, ViewCorrection):
        raise ConfigError(f"{where} type {kind!r} does not derive from splattrain.view_opt.ViewCorrection")
    return module


def check_sections(appearance: Mapping[str, Any], pose_opt: Mapping[str, Any]) -> None:
    """Refuse unknown types and options in the ``appearance`` and ``pose_opt`` sections."""
    _build(APPEARANCE, appearance, "appearance", 1)
    _build(POSE_OPT, pose_opt, "pose_opt", 1)


APPEARANCE.set_checker(lambda spec, where: _build(APPEARANCE, spec, where, 1) and None)
POSE_OPT.set_checker(lambda spec, where: _build(POSE_OPT, spec, where, 1) and None)


class ViewCorrections:
    """The optional per-view modules a run trains (both None by default: then every call is a no-op).

    ``cameras`` (the training cameras), ``points`` (the initial Gaussian means) and ``scene_scale``
    go to each module's :meth:`ViewCorrection.setup`; without ``cameras`` it is not called.
    """

    def __init__(
        self,
        appearance: Mapping[str, Any],
        pose_opt: Mapping[str, Any],
        n_views: int,
        device: torch.device,
        renderer: object = None,
        max_steps: int = 1,
        cameras: Optional[List[Camera]] = None,
        points: Optional[Tensor] = None,
        scene_scale: float = 1.0,
    ) -> None:
        self.appearance = _build(APPEARANCE, appearance, "appearance", n_views)
        self.pose = _build(POSE_OPT, pose_opt, "pose_opt", n_views)
        if self.pose is not None and renderer is not None and not getattr(renderer, "supports_pose_grad", False):
            raise ConfigError(
                f"pose_opt needs a renderer that differentiates through camera poses; {type(renderer).__name__} "
                "does not (the built-in cpu, torch and gsplat renderers do)"
            )
        self.max_steps = max_steps
        self.modules: Dict[str, ViewCorrection] = {
            name: module for name, module in (("appearance", self.appearance), ("pose_opt", self.pose))
            if module is not None
        }
        for module in self.modules.values():
            if cameras is not None:
                module.setup(cameras, points if points is not None else torch.zeros(0, 3), scene_scale)
            module.to(device)
        self.optimizers = {name: module.make_optimizer() for name, module in self.modules.items()}

    @property
    def enabled(self) -> bool:
        return bool(self.modules)

    def cameras(self, batch: Mapping[str, Any], step: Optional[int] = None) -> List[Camera]:
        """The batch's training cameras, pose-corrected when pose refinement is on. Given the training
        ``step``, the poses carry a gradient only while they learn: before they start, the cameras
        as given; after ``stop_step``, corrected as learned."""
        if self.pose is None or (step is not None and not self.pose.started(step, self.max_steps)):
            return batch["camera"]
        if step is not None and not self.pose.active(step, self.max_steps):
            with torch.no_grad():
                return self.pose.apply(batch["camera"], batch["image_id"])
        return self.pose.apply(batch["camera"], batch["image_id"])

    def colors(self, rgb: Tensor, batch: Mapping[str, Any]) -> Tensor:
        """Training renders [C,H,W,3] in each view's learned appearance (unchanged when off)."""
        if self.appearance is None:
            return rgb
        return self.appearance.apply(rgb, batch["image_id"])

    def regularization(self, batch: Mapping[str, Any]) -> Optional[Tensor]:
        """The modules' penalties on the batch's views, summed (None when none has one)."""
        terms = [t for t in (m.regularization(batch["image_id"]) for m in self.modules.values()) if t is not None]
        return sum(terms[1:], terms[0]) if terms else None

    def step(self, step: int, update: bool = True) -> None:
        """Apply this step's gradients (unless ``update`` is False), clear them, set next step's rates."""
        for name, optimizer in self.optimizers.items():
            if update and self.modules[name].active(step, self.max_steps):
                optimizer.step()
                self.modules[name].after_update()
            optimizer.zero_grad(set_to_none=True)
            for group in optimizer.param_groups:
                group["lr"] = self.modules[name].lr_at(step, self.max_steps)

    def state_dict(self) -> Dict[str, Any]:
        """Parameters and optimizer state of every module, by section name."""
        return {name: {"module": module.state_dict(), "optimizer": self.optimizers[name].state_dict()}
                for name, module in self.modules.items()}

    def load_state_dict(self, state: Mapping[str, Any], warn: Optional[Callable[[str], None]] = None) -> None:
        """Restore :meth:`state_dict`; a module missing from ``state`` starts from zero (with a warning)."""
        for name, module in self.modules.items():
            if name not in state:
                if warn is not None:
                    warn(f"the checkpoint has no {name} state; it starts from zero")
                continue
            missing = sorted(set(module.state_dict()) - set(state[name]["module"]))
            if missing:
                raise CheckpointError(
                    f"the checkpoint's {name} state has no {', '.join(missing)}: it was saved by an earlier "
                    f"{type(module).__name__} whose parameters mean something else; resume with {name}.type=none "
                    "or start afresh"
                )
            module.load_state_dict(state[name]["module"])
            self.optimizers[name].load_state_dict(state[name]["optimizer"])

    def report(self) -> Dict[str, float]:
        """Every module's summary figures."""
        out: Dict[str, float] = {}
        for module in self.modules.values():
            out.update(module.report())
        return out
