"""Import the modules a config names in ``imports:`` so their registrations take effect."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import List

from ..errors import ConfigError


def import_user_modules(modules: List[str], config_dir: Path | None = None) -> None:
    """Import ``modules`` (dotted names or .py paths) so their registrations take effect.

    The current directory and the config file's folder are searched as well.
    """
    for extra in (Path.cwd(), config_dir):
        if extra is not None and str(extra) not in sys.path:
            sys.path.insert(0, str(extra))
    for module in modules:
        name = module
        if module.endswith(".py"):
            path = Path(module)
            if not path.is_absolute() and config_dir is not None and not path.exists():
                path = config_dir / path
            if not path.is_file():
                raise ConfigError(f"imports: file '{module}' not found")
            sys.path.insert(0, str(path.parent.resolve()))
            name = path.stem
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            raise ConfigError(f"imports: cannot import module '{module}' ({err})") from None
