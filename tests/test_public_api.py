"""What plugin authors import, and what splattrain itself must never import."""

from __future__ import annotations

import ast
from pathlib import Path

import splattrain

PACKAGE = Path(splattrain.__file__).parent


def test_every_plugin_kind_is_importable_from_the_top_level():
    from splattrain import (  # noqa: F401
        DATASETS, HOOKS, LOSSES, RENDERERS, STRATEGIES, TRAINERS, WRITERS, Camera, DatasetReader, DefaultTrainer,
        Frame, GaussianModel, Hook, LossTerm, Priority, Renderer, RenderResult, SceneData, Strategy, Writer,
        strategy_ops,
    )

    for name in splattrain.__all__:
        value = getattr(splattrain, name)
        assert value is not None and (name.startswith("__") or getattr(value, "__doc__", None)), name
    assert {"default", "mcmc"} <= set(STRATEGIES) and {"l1", "dssim", "depth"} <= set(LOSSES)


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.module, alias.name


def test_no_private_name_of_another_library_is_imported():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for module, name in _imports(path):
            if module.split(".")[0] in ("splattrain", "__future__"):
                continue
            parts = module.split(".") + ([name] if name else [])
            if any(part.startswith("_") for part in parts):
                offenders.append(f"{path.relative_to(PACKAGE)}: {module} {name or ''}")
            if module.startswith(("gsplat.strategy", "gsplat.relocation", "gsplat.utils", "gsplat.cuda")):
                offenders.append(f"{path.relative_to(PACKAGE)}: {module} (only gsplat's rasterization is used)")
    assert offenders == []
