"""Import the modules a config names in ``imports:`` so their registrations take effect.

Only the modules named are loaded from the config's folder or the working directory, and
only when no installed module has that name: neither folder is put on ``sys.path``, so a
stray ``lpips.py`` or ``numpy.py`` beside a config is never imported in place of a package.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import List, Optional

from ..errors import ConfigError


def import_user_modules(modules: List[str], config_dir: Path | None = None) -> List[ModuleType]:
    """Import ``modules`` (dotted names or .py paths) so their registrations take effect.

    A ``.py`` path is read relative to the working directory, else to the config's folder,
    and loaded under a name of its own. A dotted name is imported as usual; when nothing
    installed has that name, its top-level module is looked for in the config's folder, then
    in the working directory. A module that is missing, has a syntax error or raises while
    it is imported is reported as a ConfigError naming it. Returns the imported modules.
    """
    loaded = []
    for module in modules:
        module = str(module)
        loaded.append(_import_file(module, config_dir) if module.endswith(".py") else _import_name(module, config_dir))
    return loaded


def resolved_imports(modules: List[str], config_dir: Path | None = None) -> List[str]:
    """``modules`` as a run folder's config.yaml keeps them, found from any directory: a ``.py``
    path, or a dotted name that only a file beside the config (or in the working directory)
    provides, becomes that file's absolute path; installed modules keep their names."""
    resolved = []
    for module in map(str, modules):
        if module.endswith(".py"):
            path = _module_file(module, config_dir)
            resolved.append(str(path) if path.is_file() else module)
            continue
        top = module.split(".")[0]
        local = None if "." in module or top in sys.modules or _installed_spec(top) is not None else \
            _local_spec(top, [d for d in (config_dir, Path.cwd()) if d is not None])
        origin = getattr(local, "origin", None)
        plain_file = origin is not None and Path(origin).suffix == ".py" and Path(origin).name != "__init__.py"
        resolved.append(str(Path(origin).resolve()) if plain_file else module)
    return resolved


def _module_file(module: str, config_dir: Path | None) -> Path:
    """The file a ``.py`` entry names: as given, else relative to the config's folder."""
    path = Path(module)
    if not path.is_absolute() and config_dir is not None and not path.exists():
        path = config_dir / path
    return path.resolve() if path.is_file() else path


def _import_file(module: str, config_dir: Path | None) -> ModuleType:
    path = _module_file(module, config_dir)
    if not path.is_file():
        raise ConfigError(f"imports: file '{module}' not found")
    name = f"splattrain_user_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"imports: file '{module}' cannot be imported")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    _run(lambda: spec.loader.exec_module(loaded), module, name)
    return loaded


def _import_name(module: str, config_dir: Path | None) -> ModuleType:
    top = module.split(".")[0]
    if top not in sys.modules and _installed_spec(top) is None:
        local = _local_spec(top, [d for d in (config_dir, Path.cwd()) if d is not None])
        if local is None:
            raise ConfigError(f"imports: cannot import module '{module}' (no module named '{top}')")
        loaded = importlib.util.module_from_spec(local)
        sys.modules[top] = loaded
        _run(lambda: local.loader.exec_module(loaded), module, top)
    try:
        return _run(lambda: importlib.import_module(module), module, module)
    except ModuleNotFoundError as err:  # pragma: no cover - _run turns it into a ConfigError
        raise ConfigError(f"imports: cannot import module '{module}' ({err})") from None


def _installed_spec(name: str) -> Optional[importlib.machinery.ModuleSpec]:
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _local_spec(name: str, folders: List[Path]) -> Optional[importlib.machinery.ModuleSpec]:
    for folder in folders:
        spec = importlib.machinery.PathFinder.find_spec(name, [str(folder)])
        if spec is not None and spec.loader is not None:
            return spec
    return None


def _run(load, module: str, name: str):
    """Call ``load``; any failure becomes a one-line ConfigError naming ``module`` (and the line)."""
    try:
        return load()
    except ConfigError:
        sys.modules.pop(name, None)
        raise
    except SyntaxError as err:
        sys.modules.pop(name, None)
        raise ConfigError(f"imports: module '{module}' has a syntax error ({err.filename}, line {err.lineno}: {err.msg})") from None
    except ModuleNotFoundError as err:
        sys.modules.pop(name, None)
        raise ConfigError(f"imports: cannot import module '{module}' ({err})") from None
    except Exception as err:
        sys.modules.pop(name, None)
        where = traceback.extract_tb(err.__traceback__)[-1]
        raise ConfigError(
            f"imports: module '{module}' raised {type(err).__name__} while it was imported "
            f"({Path(where.filename).name}, line {where.lineno}: {err})"
        ) from None
