"""splattrain: a hookable trainer for 3D Gaussian Splatting scenes.

Everything a plugin author needs is importable from here: the registries, the base classes of
every kind of plugin (Hook, Writer, LossTerm, Strategy, Renderer, DatasetReader) and the data
types they exchange (RenderResult, Camera, Frame, SceneData, GaussianModel). The names are
imported on first use, so ``import splattrain`` alone stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name -> the module defining it.
_EXPORTS = {
    "Camera": ".cameras",
    "DatasetReader": ".data.reader",
    "Frame": ".data.types",
    "SceneData": ".data.types",
    "ConfigError": ".errors",
    "DataError": ".errors",
    "UserError": ".errors",
    "Hook": ".hooks",
    "Priority": ".hooks",
    "RunSchedule": ".protocol",
    "StepOutputs": ".protocol",
    "StrategyContext": ".protocol",
    "Trainer": ".protocol",
    "LossTerm": ".losses",
    "GaussianModel": ".model.gaussians",
    "Registry": ".registry",
    "DATASETS": ".registry",
    "HOOKS": ".registry",
    "LOSSES": ".registry",
    "RENDERERS": ".registry",
    "STRATEGIES": ".registry",
    "TRAINERS": ".registry",
    "APPEARANCE": ".registry",
    "POSE_OPT": ".registry",
    "ViewCorrection": ".view_opt.base",
    "WRITERS": ".registry",
    "Renderer": ".render.base",
    "RenderResult": ".render.base",
    "RenderScene": ".render.base",
    "Strategy": ".strategy",
    "strategy_ops": ".strategy.ops",
    "DefaultTrainer": ".engine",
    "Writer": ".writers",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'splattrain' has no attribute {name!r}")
    value = importlib.import_module(module, __name__)
    value = value if name == "strategy_ops" else getattr(value, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
