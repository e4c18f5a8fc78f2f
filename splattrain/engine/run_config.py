"""A run's config: read, its plugins checked, its step settings fitted to the run's length.

Explicit beats scaled: the settings of the config file (and the defaults it leaves) are written
for ``trainer.schedule_steps`` steps and follow ``trainer.max_steps`` (and ``steps_scaler``); a
setting given on the command line is the user's own and is taken as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Tuple

from omegaconf import DictConfig

from ..config.imports import import_user_modules, resolved_imports
from ..config.loader import read_config
from ..errors import ConfigError
from .plugins import check_plugin_sections
from .step_scaling import scale_steps

@dataclass(frozen=True)
class RunConfig:
    """A checked config and the step settings scaling changed (one line each, for the header)."""

    cfg: DictConfig
    scaled: Tuple[str, ...] = ()


def prepare_config(cfg: DictConfig, config_dir: Optional[Path]) -> Tuple[str, ...]:
    """What the trainer does to any config it is given: its ``imports:`` named by absolute path (so
    the run's config.yaml finds them from any directory) and imported; a config not fitted to its
    run yet (built in code, not read by :func:`load_config`) scaled here. Returns the lines of
    the settings scaled here (none for a config :func:`load_config` read)."""
    cfg.imports = resolved_imports(list(cfg.imports), config_dir)
    import_user_modules(list(cfg.imports), config_dir)
    if cfg.trainer.schedule_steps is not None or float(cfg.trainer.steps_scaler) != 1.0:
        return tuple(scale_steps(cfg))
    return ()


def load_config(path: str | Path, overrides: Sequence[str] = (), check_plugins: bool = True) -> DictConfig:
    """The config of ``path`` with ``dotted.key=value`` overrides, checked and fitted to the run
    (:func:`load_run_config`)."""
    return load_run_config(path, overrides, check_plugins).cfg


def load_run_config(path: str | Path, overrides: Sequence[str] = (), check_plugins: bool = True) -> RunConfig:
    """Read ``path`` with ``overrides`` (ConfigError naming the file, the override and the key);
    with ``check_plugins``, import the modules in ``imports:``, check every plugin section against
    its class, and scale the file's step settings to the run while the overrides stay as given."""
    path = Path(path)
    cfg = read_config(path, overrides)
    cfg.imports = resolved_imports(list(cfg.imports), path.parent)  # config.yaml of the run finds them anywhere
    if not check_plugins:
        return RunConfig(cfg)
    source = f"{path}" + (" + overrides" if overrides else "")
    try:
        check_plugin_sections(cfg, path.parent)
        explicit = [item.split("=", 1)[0].strip() for item in overrides]
        return RunConfig(cfg, tuple(scale_steps(cfg, explicit)))
    except ConfigError as err:
        if str(err).startswith(str(path)):
            raise
        raise ConfigError(f"{source}: {err}") from None
