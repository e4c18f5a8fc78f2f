"""Configs built on other configs: ``_base_`` (MMEngine's convention).

A config names one base file or a list of them in ``_base_``, each relative to the config's
own folder (or absolute). The bases are merged in order, then the config over them:

- mappings merge key by key; a mapping holding ``_delete_: true`` replaces the base's mapping
  instead (its other keys are the new value);
- lists and plain values replace the base's, except ``imports``, which adds to the bases'
  (a base's plugins stay imported);
- a base may have bases of its own; a chain that comes back to a file is refused.

A base's relative ``imports`` and ``data.path`` are read from the base's folder (and its parent,
as ``fit`` reads a config's), so a preset keeps working from any working directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from ..errors import ConfigError
from .imports import resolved_imports

BASE_KEY = "_base_"
DELETE_KEY = "_delete_"
#: The most files one config may be built from (bases of bases counted).
MAX_FILES = 64

ReadFile = Callable[[Path], Dict[str, Any]]


def read_layered(path: Path, read_file: ReadFile) -> Dict[str, Any]:
    """The plain config data of ``path`` with its bases merged under it (ConfigError naming the
    file for a missing base, a bad ``_base_`` value or a loop)."""
    return _read(path, read_file, (), [0])


def _read(path: Path, read_file: ReadFile, chain: Tuple[Path, ...], count: List[int]) -> Dict[str, Any]:
    resolved = path.resolve()
    if resolved in chain:
        loop = " -> ".join(str(p) for p in (*chain[chain.index(resolved):], resolved))
        raise ConfigError(f"{path}: {BASE_KEY} comes back to this file ({loop})")
    count[0] += 1
    if count[0] > MAX_FILES:
        raise ConfigError(f"{path}: built from more than {MAX_FILES} config files through {BASE_KEY}")
    data = read_file(path)
    bases = _base_paths(data.pop(BASE_KEY, None), path)
    merged: Dict[str, Any] = {}
    for base in bases:
        if not base.is_file():
            raise ConfigError(f"{path}: {BASE_KEY} file '{base}' not found")
        layer = _anchor_paths(_read(base, read_file, (*chain, resolved), count), base.parent)
        merged = merge_layers(merged, layer, f"{base}")
    return merge_layers(merged, data, str(path)) if bases else _strip_deletes(data)


def _base_paths(value: Any, path: Path) -> List[Path]:
    if value is None:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(f"{path}: {BASE_KEY} must be a config file or a list of them, got {value!r}")
    return [Path(n) if Path(n).is_absolute() else path.parent / n for n in names]


def _anchor_paths(data: Dict[str, Any], folder: Path) -> Dict[str, Any]:
    """A base's relative ``imports`` and ``data.path`` made absolute where they exist beside it."""
    imports = data.get("imports")
    if isinstance(imports, list):
        data["imports"] = resolved_imports([str(m) for m in imports], folder)
    section = data.get("data")
    given = section.get("path") if isinstance(section, dict) else None
    if isinstance(given, str) and given and not Path(given).is_absolute():
        for root in (folder, folder.parent):
            if (root / given).exists():
                section["path"] = str((root / given).resolve())
                break
    return data


def merge_layers(base: Dict[str, Any], update: Dict[str, Any], source: str) -> Dict[str, Any]:
    """``update`` merged over ``base`` by the rules above (neither is changed)."""
    merged = dict(base)
    for key, value in update.items():
        if key == "imports" and isinstance(value, list) and isinstance(base.get(key), list):
            merged[key] = base[key] + [m for m in value if m not in base[key]]
        elif isinstance(value, dict):
            replace = value.get(DELETE_KEY, False)
            if not isinstance(replace, bool):
                raise ConfigError(f"{source}: key '{key}.{DELETE_KEY}' must be true or false, got {replace!r}")
            inner = {k: v for k, v in value.items() if k != DELETE_KEY}
            below = base.get(key)
            merged[key] = merge_layers(below, inner, source) if isinstance(below, dict) and not replace \
                else _strip_deletes(inner)
        else:
            merged[key] = value
    return merged


def _strip_deletes(data: Dict[str, Any]) -> Dict[str, Any]:
    """``data`` without ``_delete_`` keys (meaningless where nothing lies below)."""
    return {k: _strip_deletes(v) if isinstance(v, dict) else v for k, v in data.items() if k != DELETE_KEY}
