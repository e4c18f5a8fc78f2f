"""Check a config's plugin sections (renderer, strategy, loss, view corrections, data, hooks, writers)
against the registered classes, after importing the modules named in ``imports:``.

Each registry imports the modules that register its built-ins the first time it is used
(its ``locations``); each package decides how its section is checked
(:meth:`splattrain.registry.Registry.set_checker`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from omegaconf import DictConfig, OmegaConf

from ..config.imports import import_user_modules
from ..errors import ConfigError
from ..registry import APPEARANCE, DATASETS, HOOKS, LOSSES, POSE_OPT, RENDERERS, STRATEGIES, TRAINERS, WRITERS


def check_plugin_sections(cfg: DictConfig, config_dir: Optional[Path] = None) -> None:
    """Import ``cfg.imports``, then refuse unknown types and options in every plugin section
    (renderer, strategy, loss terms, view corrections, dataset, hooks, writers, trainer type):
    one ConfigError naming the key path (``writers[0].paht``); nothing is built that has side effects."""
    import_user_modules(list(cfg.imports), config_dir)
    RENDERERS.check(_plain(cfg.renderer), "renderer")
    STRATEGIES.check(_plain(cfg.strategy), "strategy")
    LOSSES.check(_plain(cfg.loss), "loss")
    APPEARANCE.check(_plain(cfg.appearance), "appearance")
    POSE_OPT.check(_plain(cfg.pose_opt), "pose_opt")
    if cfg.data.type != "auto":
        DATASETS.check({"type": cfg.data.type, **_plain(cfg.data.options)}, "data.options")
    elif cfg.data.options:
        raise ConfigError("data.options needs an explicit data.type (the options belong to one reader)")
    HOOKS.check({"default_hooks": _plain(cfg.default_hooks), "custom_hooks": [_plain(s) for s in cfg.custom_hooks]}, "")
    WRITERS.check([_plain(s) for s in cfg.writers], "writers")
    TRAINERS.get(str(cfg.trainer.type))  # its options are the trainer section's schema keys


def _plain(node: Any) -> Dict[str, Any]:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node or {})
