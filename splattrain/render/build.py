"""Build the renderer a config's ``renderer`` section names; what ``auto`` picks."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import torch

from ..errors import ConfigError
from ..registry import RENDERERS, check_options
from . import cpu_renderer
from .base import Renderer

Message = Optional[Callable[[str], None]]

#: What ``renderer.type: auto`` may pick; its options are checked against all of them.
AUTO_CHOICES = ("gsplat", "cpu", "torch")


def check_renderer_options(spec: Mapping[str, Any], where: str = "renderer") -> None:
    """Refuse options no candidate renderer takes (for ``auto``: none of gsplat, cpu, torch)."""
    options = {k: v for k, v in spec.items() if k != "type"}
    kind = str(spec.get("type", "auto"))
    if kind != "auto":
        cls = RENDERERS.get(kind)
        options = check_options(cls, options, f"renderer {kind!r}", where)
        if cls.__module__.startswith(__package__):  # built-ins construct cheaply: check the values too
            cls(**options)
        return
    accepted = set().union(*(RENDERERS.options(name) for name in AUTO_CHOICES))
    unknown = [key for key in options if key not in accepted]
    if unknown:
        check_options(RENDERERS.get("gsplat"), {unknown[0]: options[unknown[0]]}, "renderer 'auto'", where)
    for name in AUTO_CHOICES:  # the values, through every candidate that takes them
        cls = RENDERERS.get(name)
        taken = {k: v for k, v in options.items() if k in RENDERERS.options(name)}
        cls(**check_options(cls, taken, f"renderer 'auto' ({name})", where))


RENDERERS.set_checker(check_renderer_options)


def resolve_auto(device: torch.device, log: Message = None, warn: Message = None) -> str:
    """``auto``: gsplat on CUDA; else the compiled CPU backend, or torch when that cannot be built
    (after one ``warn``)."""
    if device.type == "cuda":
        return "gsplat"
    return cpu_renderer.auto_cpu_backend(device, log, warn)


def build_renderer(
    spec: Mapping[str, Any], device: torch.device, log: Message = None, warn: Message = None, absgrad: bool = False,
    gsplat_off_cuda: bool = False,
) -> Renderer:
    """The renderer ``{type, **options}`` (``type`` default ``auto``), ready for ``device``, with
    ``absgrad`` set; ``log`` hears about the CPU backend's first-use compile and ``auto``'s choice.

    ``gsplat_off_cuda`` is for the test suite only, which runs gsplat's Python code on CPU with its
    CUDA kernels replaced by reference implementations; nothing else sets it."""
    spec = dict(spec)
    kind = str(spec.get("type", "auto"))
    if kind == "auto":
        spec["type"] = kind = resolve_auto(device, log, warn)
        options = {k: v for k, v in spec.items() if k != "type"}
        extra = [key for key in options if key not in RENDERERS.options(kind)]
        if extra:
            raise ConfigError(f"renderer.{extra[0]} is not an option of the {kind!r} renderer that renderer.type "
                              f"auto picked on this machine; set renderer.type or drop renderer.{extra[0]}")
    elif kind == "gsplat" and device.type != "cuda" and not gsplat_off_cuda:
        raise ConfigError(f"renderer.type 'gsplat' needs a CUDA device, but the run uses '{device}'; use 'auto' or 'torch'")
    elif kind == "cpu":
        cpu_renderer.require_cpu_backend(device, log)
    renderer = RENDERERS.build(spec, where="renderer")
    if not isinstance(renderer, Renderer):
        raise ConfigError(f"renderer {kind!r} does not derive from splattrain.Renderer")
    renderer.absgrad = absgrad
    return renderer
