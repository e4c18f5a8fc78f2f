"""The built-in registrations, read from splattrain's sources without importing them.

``splattrain list`` answers from here, so it starts in a fraction of a second instead of
importing PyTorch and every plugin module. A class or function counts when it is decorated
``@<KIND>.register(...)`` (``HOOKS``, ``WRITERS``, ...) in a module of the package; the
description is what :meth:`splattrain.registry.Registry.describe` gives for it (the first line
of its docstring, then its aliases). ``tests/test_catalog.py`` checks the two agree.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

PACKAGE = Path(__file__).resolve().parent


def _literal(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _registrations(tree: ast.Module, variable: str) -> Iterator[Tuple[str, List[str], str]]:
    """(name, aliases, first docstring line) of each class or function in ``tree`` registered on ``variable``."""
    for node in ast.walk(tree):
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            continue
        for decorator in node.decorator_list:
            if not (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
                    and decorator.func.attr == "register" and isinstance(decorator.func.value, ast.Name)
                    and decorator.func.value.id == variable):
                continue
            name = _literal(decorator.args[0]) if decorator.args else None
            aliases = next((_literal(k.value) for k in decorator.keywords if k.arg == "aliases"), ()) or ()
            doc = ast.get_docstring(node) or ""
            yield str(name or node.name), [str(a) for a in aliases], doc.splitlines()[0] if doc else ""


def describe_builtin(kind: str, package: Optional[Path] = None) -> Dict[str, str]:
    """Primary name -> description of the built-in ``kind`` (``hooks``, ``writers``, ...),
    sorted by name, as ``Registry.describe()`` would list them once every module is imported."""
    variable = kind.upper()
    marker = f"@{variable}.register("
    found: Dict[str, str] = {}
    for path in sorted((package or PACKAGE).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if marker not in text:
            continue
        for name, aliases, line in _registrations(ast.parse(text, filename=str(path)), variable):
            found[name] = line + (f" (also: {', '.join(aliases)})" if aliases else "")
    return dict(sorted(found.items()))
