"""Load a YAML config into the typed schema, apply dotted overrides, and validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from .. import interrupts
from ..errors import ConfigError
from ..nested import check_nested
from .bases import read_layered
from .schema import SplatConfig
from .values import check_numbers

_CHOICES = {
    "model.init.type": ("auto", "points", "random"),
    "export.world_frame": ("original", "normalized"),
}
_POSITIVE = ("trainer.max_steps", "data.downscale")
_NON_NEGATIVE = ("trainer.val_interval", "model.sh_degree", "model.sh_degree_interval")


def _describe(err: OmegaConfBaseException) -> str:
    """First line of an OmegaConf error, prefixed with the offending key when known."""
    message = str(getattr(err, "msg", None) or err).splitlines()[0]
    key = getattr(err, "full_key", None)
    return f"key '{key}': {message}" if key else message


#: Values a config may expand to (aliases counted each time they are used), per byte of the file.
EXPANSION_PER_BYTE = 20
_MIN_EXPANSION = 100_000
_SIGNAL_EVERY = 4096


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, acting on a stop signal every few thousand nodes (a large file parses
    for a while)."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self.nodes = 0

    def compose_node(self, parent, index):
        self.nodes += 1
        if self.nodes % _SIGNAL_EVERY == 0:
            interrupts.check()
        return super().compose_node(parent, index)


def _check_expansion(data: Any, path: Path, size: int) -> None:
    """Refuse a document whose values, with every alias expanded, far outnumber its bytes (an
    alias bomb would expand to gigabytes in the config tree), or that contains itself (an alias
    inside its own anchor); counted without expanding."""
    limit = max(_MIN_EXPANSION, EXPANSION_PER_BYTE * size)
    check_nested(data, "config", lambda problem: ConfigError(
        f"{path}: with its YAML aliases expanded, {problem} ({size} bytes); a config this large or looped is "
        "refused (write the values out, or use fewer nested aliases)"), max_entries=limit)


def _read_yaml(path: Path) -> DictConfig:
    """The config of ``path`` with its ``_base_`` files merged under it (:mod:`.bases`)."""
    return OmegaConf.create(read_layered(path, _read_yaml_file))


def _read_yaml_file(path: Path) -> Dict[str, Any]:
    if not path.is_file():
        raise ConfigError(f"config file '{path}' not found")
    try:
        text = path.read_text(encoding="utf-8")
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except UnicodeDecodeError as err:
        raise ConfigError(f"config file '{path}' is not UTF-8 text (byte {err.start}); is it a YAML file?") from None
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML: nested too deeply") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"{path}:{where} invalid YAML: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, not {type(data).__name__}")
    _check_expansion(data, path, len(text.encode("utf-8")))
    return data


def _check_interpolations(cfg: DictConfig, source: str) -> None:
    """Refuse ``${...}`` interpolations that do not resolve (a loop, an unset ``oc.env`` variable,
    a missing key), naming the key."""
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as err:
        raise ConfigError(f"{source}: {_describe(err)}") from None
    except RecursionError:
        raise ConfigError(f"{source}: the ${{...}} interpolations refer to each other in a loop") from None


def _parse_overrides(overrides: Sequence[str]) -> DictConfig:
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override '{item}' is not of the form dotted.key=value")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as err:
        raise ConfigError(f"overrides {' '.join(overrides)}: {_describe(err)}") from None


def _merge(base: DictConfig, update: DictConfig, source: str) -> DictConfig:
    try:
        return OmegaConf.merge(base, update)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        raise ConfigError(f"{source}: {_describe(err)}") from None
    except (TypeError, ValueError) as err:  # e.g. a dotted override into a list item
        raise ConfigError(
            f"{source}: {err} (overrides cannot reach into lists such as custom_hooks or writers; "
            "change those in the config file)"
        ) from None


def check_values(cfg: DictConfig, source: str) -> None:
    """Refuse missing required keys, unknown choices and out-of-range values (ConfigError naming ``source``)."""
    for key in ("name", "data.path"):
        try:
            OmegaConf.select(cfg, key, throw_on_missing=True)
        except MissingMandatoryValue:
            raise ConfigError(f"{source}: missing required key '{key}'") from None
    for key, choices in _CHOICES.items():
        value = OmegaConf.select(cfg, key)
        if value not in choices:
            raise ConfigError(f"{source}: key '{key}' is {value!r}; expected one of {', '.join(choices)}")
    for key in _POSITIVE:
        if not OmegaConf.select(cfg, key) > 0:
            raise ConfigError(f"{source}: key '{key}' must be > 0, got {OmegaConf.select(cfg, key)}")
    for key in _NON_NEGATIVE:
        if OmegaConf.select(cfg, key) < 0:
            raise ConfigError(f"{source}: key '{key}' must be >= 0, got {OmegaConf.select(cfg, key)}")
    check_numbers(cfg, source)
    for key in ("writers", "custom_hooks"):
        for spec in cfg[key]:
            if not isinstance(spec, DictConfig) or "type" not in spec:
                raise ConfigError(f"{source}: every entry of '{key}' needs a 'type', got {spec!r}")
    for name, spec in cfg.default_hooks.items():
        if spec is not None and not isinstance(spec, DictConfig):
            raise ConfigError(
                f"{source}: default_hooks.{name} must be a mapping of options or null, got {spec!r}"
            )


def read_config(path: str | Path, overrides: Sequence[str] = ()) -> DictConfig:
    """Read ``path``, merge it over the schema defaults, then apply ``key=value`` overrides.

    Raises ConfigError naming the file (or the override) and the key for unknown keys,
    values of the wrong type, missing required keys and out-of-range values. Plugin sections are
    checked, and step settings scaled, by :func:`splattrain.engine.load_config`, which reads
    configs through this.
    """
    path = Path(path)
    schema = OmegaConf.structured(SplatConfig)
    cfg = _merge(schema, _read_yaml(path), str(path))
    if overrides:
        cfg = merge_overrides(cfg, overrides, f"{path} (command-line overrides)")
    source = f"{path}" + (" + overrides" if overrides else "")
    _check_interpolations(cfg, source)
    check_values(cfg, source)
    if cfg.output_dir is None:
        cfg.output_dir = str(Path("outputs") / cfg.name)
    return cfg


def merge_overrides(cfg: DictConfig, overrides: Sequence[str], source: str) -> DictConfig:
    """``cfg`` with the ``dotted.key=value`` items applied (ConfigError naming ``source`` and the key)."""
    return _merge(cfg, _parse_overrides(overrides), source)


def config_to_yaml(cfg: DictConfig) -> str:
    """The fully resolved config as YAML text."""
    return OmegaConf.to_yaml(cfg, resolve=True)
