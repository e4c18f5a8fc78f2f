"""Check a config's plugin sections (renderer, strategy, loss, data, hooks) against the
registered classes, after importing the modules named in ``imports:``."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import DictConfig, OmegaConf

from ..errors import ConfigError
from ..registry import DATASETS, HOOKS, check_options
from .imports import import_user_modules


def register_builtins() -> None:
    """Import the modules that register the built-in renderers, strategies, losses, datasets and
    appearance / pose modules."""
    from .. import losses, render, strategy, view_opt  # noqa: F401
    from ..data import loading  # noqa: F401


def check_plugin_sections(cfg: DictConfig, config_dir: Optional[Path] = None) -> None:
    """Import ``cfg.imports``, then refuse unknown types and options in every plugin section
    (ConfigError naming the key); nothing is built that has side effects."""
    from ..losses import build_loss
    from ..render import check_renderer_options
    from ..strategy import build_strategy

    import_user_modules(list(cfg.imports), config_dir)
    register_builtins()
    check_renderer_options(_plain(cfg.renderer))
    strategy = build_strategy(_plain(cfg.strategy))
    build_loss(_plain(cfg.loss), strategy.default_loss_terms())
    from ..view_opt.corrections import check_sections

    check_sections(_plain(cfg.appearance), _plain(cfg.pose_opt))
    if cfg.data.type != "auto":
        check_options(DATASETS.get(cfg.data.type), _plain(cfg.data.options), f"dataset {cfg.data.type!r}", "data.options")
    elif cfg.data.options:
        raise ConfigError("data.options needs an explicit data.type (the options belong to one reader)")
    from ..hooks.specs import DEFAULT_HOOKS, hook_specs

    for name, spec in hook_specs(_plain(cfg.default_hooks), [_plain(s) for s in cfg.custom_hooks]):
        options = {k: v for k, v in spec.items() if k not in ("type", "priority")}
        section = f"default_hooks.{name}" if name in DEFAULT_HOOKS or name in cfg.default_hooks else "custom_hooks"
        check_options(HOOKS.get(str(spec["type"])), options, f"hook {name!r} ({spec['type']})", section)


def _plain(node: Any) -> Dict[str, Any]:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
