"""What a checkpoint must hold, checked once before anything uses it.

:func:`check_scene` is what ``eval``, ``render``, ``export`` and ``view`` need (the Gaussians, their
SH degree, step, config, world transform and renderer state); :func:`check_resume` adds what continuing a run
needs (optimizer, strategy and hook states matching the Gaussians, RNG states, the view order).
Each refusal is a CheckpointError naming the file and the entry.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from ..config.loader import check_values
from ..config.schema import SplatConfig
from ..config.values import MAX_SH_DEGREE
from ..errors import CheckpointError, ConfigError
from ..strategy.protocol import Strategy
from .files import RESUME_KEYS, SCENE_KEYS, require_keys

#: The Gaussian parameters and their shapes after the count N (K: higher-order SH coefficients).
_PARAM_SHAPES = {"means": (3,), "scales": (3,), "quats": (4,), "opacities": (), "sh0": (1, 3), "shN": ("K", 3)}
#: The names of the Gaussian parameters.
PARAM_NAMES = tuple(_PARAM_SHAPES)


class _Refuse:
    """Raises CheckpointError naming the file and the entry."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, entry: str, problem: str) -> CheckpointError:
        return CheckpointError(f"checkpoint '{self.path}': {entry} {problem}; it is not a usable splattrain checkpoint")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _tensor(refuse: _Refuse, entry: str, value: Any, shape: Optional[Sequence[int]] = None,
            dtype: Optional[torch.dtype] = torch.float32) -> torch.Tensor:
    """``value`` as a dense CPU tensor of ``dtype`` (and ``shape``), else a refusal."""
    if not isinstance(value, torch.Tensor):
        raise refuse(entry, f"is a {type(value).__name__}, not a tensor")
    if value.layout != torch.strided or value.is_sparse:
        raise refuse(entry, f"is a {value.layout} tensor, not a dense one")
    if value.device.type == "meta":
        raise refuse(entry, "is a tensor without data (device meta)")
    if dtype is not None and value.dtype != dtype:
        raise refuse(entry, f"has dtype {value.dtype}, not {dtype}")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise refuse(entry, f"has shape {list(value.shape)}, not {list(shape)}")
    return value


def check_gaussians(refuse: _Refuse, gaussians: Any, sh_degree: int) -> Dict[str, tuple]:
    """The Gaussian parameters: exactly the six, float32, one count N, finite; their shapes."""
    if not isinstance(gaussians, Mapping):
        raise refuse("'gaussians'", f"is a {type(gaussians).__name__}, not a dict of tensors")
    if set(gaussians) != set(_PARAM_SHAPES):
        raise refuse("'gaussians'", f"holds {sorted(map(str, gaussians))}, not {sorted(_PARAM_SHAPES)}")
    means = _tensor(refuse, "gaussians.means", gaussians["means"])
    if means.dim() != 2:
        raise refuse("gaussians.means", f"has shape {list(means.shape)}, not [N, 3]")
    n, k = means.shape[0], (sh_degree + 1) ** 2 - 1
    shapes = {}
    for name, tail in _PARAM_SHAPES.items():
        shape = (n, *(k if size == "K" else size for size in tail))
        value = _tensor(refuse, f"gaussians.{name}", gaussians[name], shape)
        if not bool(torch.isfinite(value).all()):
            raise refuse(f"gaussians.{name}", "holds NaN or infinite values")
        shapes[name] = shape
    return shapes


def check_scene(checkpoint: Any, path: str | Path) -> DictConfig:
    """Check what rendering a checkpoint's scene needs; returns its config merged over the schema."""
    path = Path(path)
    refuse = _Refuse(path)
    require_keys(checkpoint, path, SCENE_KEYS, "render a scene")
    sh_degree, step = checkpoint["sh_degree"], checkpoint["step"]
    if not (_integer(sh_degree) and 0 <= sh_degree <= MAX_SH_DEGREE):
        raise refuse("'sh_degree'", f"is {sh_degree!r}, not a whole number in 0..{MAX_SH_DEGREE}")
    if not (_integer(step) and step >= 0):
        raise refuse("'step'", f"is {step!r}, not a whole number >= 0")
    if not isinstance(checkpoint["config"], Mapping):
        raise refuse("'config'", f"is a {type(checkpoint['config']).__name__}, not a dict")
    try:
        cfg = OmegaConf.merge(OmegaConf.structured(SplatConfig), checkpoint["config"])
        check_values(cfg, f"checkpoint '{path}' config")
    except ConfigError as err:
        raise CheckpointError(str(err)) from None
    except Exception as err:  # a config the schema rejects: the file is not one splattrain wrote
        raise CheckpointError(f"checkpoint '{path}' holds an invalid config ({str(err).splitlines()[0]})") from None
    if step > cfg.trainer.max_steps:
        raise refuse("'step'", f"is {step}, past its config's trainer.max_steps {cfg.trainer.max_steps}")
    check_gaussians(refuse, checkpoint["gaussians"], sh_degree)
    if checkpoint.get("world_transform") is not None:
        _check_transform(refuse, "'world_transform'", checkpoint["world_transform"])
    if "renderer" in checkpoint:
        _check_renderer(refuse, checkpoint["renderer"])
    return cfg


def _check_renderer(refuse: _Refuse, entry: Any) -> None:
    """The renderer's entry: its class name, whether it folds into exports, and its state (a
    dict whose tensors are dense real ones)."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("state", {}), Mapping):
        raise refuse("'renderer'", "is not a dict with a 'state' dict")
    if not isinstance(entry.get("folds_into_export", False), bool) or not isinstance(entry.get("type", ""), str):
        raise refuse("'renderer'", "has a 'folds_into_export' other than true/false or a 'type' other than a name")

    def walk(value: Any, where: str) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(item, f"{where}.{key}")
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                walk(item, f"{where}[{index}]")
        elif isinstance(value, torch.Tensor):
            if _tensor(refuse, where, value, dtype=None).is_complex():
                raise refuse(where, f"is a {value.dtype} tensor, not a real one")

    walk(entry.get("state", {}), "renderer.state")


def _check_transform(refuse: _Refuse, entry: str, value: Any) -> None:
    transform = _tensor(refuse, entry, value, (4, 4), dtype=None)
    if not transform.is_floating_point() or not bool(torch.isfinite(transform).all()):
        raise refuse(entry, "is not a finite floating-point 4x4 matrix")
    if not torch.equal(transform[3], torch.tensor([0, 0, 0, 1], dtype=transform.dtype)):
        raise refuse(entry, "has a last row other than [0, 0, 0, 1]")
    if torch.linalg.matrix_rank(transform.double()[:3, :3]) < 3:
        raise refuse(entry, "is singular (not invertible)")


def check_resume(checkpoint: Any, path: str | Path, optimizers: Mapping[str, torch.optim.Optimizer],
                 strategy: Strategy, scene_scale: float, train_views: int) -> None:
    """Check the rest of what :func:`~splattrain.engine.checkpointing.restore` loads, in a
    checkpoint that passed :func:`check_scene`, against the run's ``optimizers``, its ``strategy``
    (the state it starts with in a scene of ``scene_scale``) and its ``train_views`` training views."""
    path = Path(path)
    refuse = _Refuse(path)
    require_keys(checkpoint, path, RESUME_KEYS, "resume a run")
    shapes = {name: tuple(value.shape) for name, value in checkpoint["gaussians"].items()}
    n = shapes["means"][0]
    _check_optimizers(refuse, checkpoint["optimizers"], optimizers, shapes)
    _check_strategy(refuse, checkpoint["strategy_state"], strategy.initialize_state(scene_scale), n)
    _check_rng(refuse, checkpoint["rng"])
    _check_data(refuse, checkpoint["data"], train_views)
    _check_hooks(refuse, checkpoint.get("hooks", {}), shapes)
    for key in ("training_gaussians", "shadow_gaussians"):  # the engine's shadow weights (an average)
        if key in checkpoint:
            _check_shadow(refuse, key, checkpoint[key], shapes)
    for key in ("train_seconds",):
        if key in checkpoint and not _finite_number(checkpoint[key]):
            raise refuse(f"'{key}'", f"is {checkpoint[key]!r}, not a finite number")
    average = checkpoint.get("loss_average")  # the loss EMA: None before the first step, NaN after a NaN loss
    if average is not None and (isinstance(average, bool) or not isinstance(average, (int, float))):
        raise refuse("'loss_average'", f"is {average!r:.60}, not a number")
    for key in ("last_metrics", "view_opt"):
        if key in checkpoint and not isinstance(checkpoint[key], Mapping):
            raise refuse(f"'{key}'", f"is a {type(checkpoint[key]).__name__}, not a dict")


def _check_shadow(refuse: _Refuse, key: str, value: Any, shapes: Dict[str, tuple]) -> None:
    """Shadow or training weights: float32 tensors of Gaussian parameters shaped as the Gaussians."""
    if not isinstance(value, Mapping) or not value or not set(value) <= set(shapes):
        names = sorted(map(str, value)) if isinstance(value, Mapping) else type(value).__name__
        raise refuse(f"'{key}'", f"holds {names}, not weights of Gaussian parameters")
    for name, tensor in value.items():
        _tensor(refuse, f"{key}.{name}", tensor, shapes[name])


def _check_optimizers(refuse: _Refuse, saved: Any, optimizers: Mapping[str, torch.optim.Optimizer],
                      shapes: Dict[str, tuple]) -> None:
    if not isinstance(saved, Mapping) or set(saved) != set(optimizers):
        names = sorted(map(str, saved)) if isinstance(saved, Mapping) else type(saved).__name__
        raise refuse("'optimizers'", f"holds {names}, not the run's {sorted(optimizers)}")
    for name, optimizer in optimizers.items():
        entry = f"optimizers.{name}"
        state = saved[name]
        if not isinstance(state, Mapping) or not isinstance(state.get("state"), Mapping) \
                or not isinstance(state.get("param_groups"), list):
            raise refuse(entry, "is not an optimizer state (a dict with 'state' and 'param_groups')")
        groups = optimizer.state_dict()["param_groups"]
        saved_groups = state["param_groups"]
        if len(saved_groups) != len(groups) or any(
            not isinstance(g, Mapping) or g.get("params") != mine["params"] for g, mine in zip(saved_groups, groups)
        ):
            raise refuse(entry, "has parameter groups that do not match the run's optimizer")
        for index, slots in state["state"].items():
            if not isinstance(slots, Mapping):
                raise refuse(f"{entry}.state[{index}]", "is not a dict")
            for slot, value in slots.items():
                where = f"{entry}.state[{index}].{slot}"
                if isinstance(value, torch.Tensor) and value.dim() == 0:
                    _tensor(refuse, where, value, dtype=None)
                    if not value.is_floating_point() or not bool(torch.isfinite(value)):
                        raise refuse(where, "is not a finite number")
                elif isinstance(value, torch.Tensor) or not _finite_number(value):
                    _tensor(refuse, where, value, shapes.get(name))


def _check_strategy(refuse: _Refuse, saved: Any, fresh: Mapping[str, Any], n: int) -> None:
    if not isinstance(saved, Mapping) or not set(fresh) <= set(saved):
        names = sorted(map(str, saved)) if isinstance(saved, Mapping) else type(saved).__name__
        raise refuse("'strategy_state'", f"holds {names}, not the run's strategy state {sorted(fresh)}")
    for key in set(saved) - set(fresh):  # entries a strategy added during the run (allocated at first use)
        value, entry = saved[key], f"strategy_state.{key}"
        if isinstance(value, torch.Tensor):
            if _tensor(refuse, entry, value, dtype=None).is_complex():
                raise refuse(entry, f"is a {value.dtype} tensor, not a real one")
        elif not (value is None or isinstance(value, str) or _finite_number(value)):
            raise refuse(entry, f"is a {type(value).__name__}; a strategy keeps tensors, numbers and strings")
    for key, mine in fresh.items():
        value, entry = saved[key], f"strategy_state.{key}"
        if isinstance(mine, torch.Tensor):
            _tensor(refuse, entry, value, tuple(mine.shape), mine.dtype)
        elif mine is None:  # allocated at first use: one row per Gaussian, of the strategy's own dtype
            if value is not None:
                tensor = _tensor(refuse, entry, value, dtype=None)
                if tensor.dim() == 0 or tensor.shape[0] != n or tensor.is_complex():
                    raise refuse(entry, f"is a {tensor.dtype} tensor of shape {list(tensor.shape)}, not {n} real rows")
        elif _integer(mine) and not _integer(value):
            raise refuse(entry, f"is {value!r:.60}, not a whole number")
        elif _finite_number(mine) and not _finite_number(value):
            raise refuse(entry, f"is {value!r:.60}, not a finite number")
        elif not _finite_number(mine) and type(value) is not type(mine):
            raise refuse(entry, f"is a {type(value).__name__}, not a {type(mine).__name__}")


def _check_rng(refuse: _Refuse, rng: Any) -> None:
    if not isinstance(rng, Mapping) or not {"python", "numpy", "torch"} <= set(rng):
        raise refuse("'rng'", "is not a dict of python, numpy and torch RNG states")
    python = rng["python"]
    if not (isinstance(python, (list, tuple)) and len(python) == 3 and _integer(python[0])
            and isinstance(python[1], (list, tuple)) and len(python[1]) == 625
            and all(_integer(v) and 0 <= v < 2**32 for v in python[1][:624]) and _integer(python[1][624])
            and 0 <= python[1][624] <= 624 and (python[2] is None or _finite_number(python[2]))):
        raise refuse("rng.python", "is not a Python random state")
    numpy_state = rng["numpy"]
    if not (isinstance(numpy_state, (list, tuple)) and len(numpy_state) == 5 and numpy_state[0] == "MT19937"
            and isinstance(numpy_state[1], torch.Tensor) and _integer(numpy_state[2]) and 0 <= numpy_state[2] <= 624
            and _integer(numpy_state[3]) and _finite_number(numpy_state[4])):
        raise refuse("rng.numpy", "is not a numpy random state")
    keys = _tensor(refuse, "rng.numpy keys", numpy_state[1], (624,), torch.int64)
    if bool(((keys < 0) | (keys >= 2**32)).any()):
        raise refuse("rng.numpy keys", "are not 32-bit words")
    _tensor(refuse, "rng.torch", rng["torch"], tuple(torch.get_rng_state().shape), torch.uint8)


def _check_data(refuse: _Refuse, data: Any, views: int) -> None:
    if not isinstance(data, Mapping) or not {"generator", "order", "position"} <= set(data):
        raise refuse("'data'", "is not a view-order state (generator, order, position)")
    _tensor(refuse, "data.generator", data["generator"], tuple(torch.Generator().get_state().shape), torch.uint8)
    order, position = data["order"], data["position"]
    if not isinstance(order, (list, tuple)) or not all(_integer(i) and 0 <= i < views for i in order):
        raise refuse("data.order", f"is not a list of view indices in 0..{views - 1} (the run has {views} training views)")
    if not (_integer(position) and 0 <= position <= len(order)):
        raise refuse("data.position", f"is {position!r}, not in 0..{len(order)}")


def _check_hooks(refuse: _Refuse, hooks: Any, shapes: Dict[str, tuple]) -> None:
    """Hook states are dicts; wherever one holds per-Gaussian tensors keyed by parameter name
    (averaged weights, training weights), they match the Gaussians."""
    if not isinstance(hooks, Mapping) or not all(isinstance(state, Mapping) for state in hooks.values()):
        raise refuse("'hooks'", "is not a dict of hook states (dicts)")

    def walk(value: Any, entry: str) -> None:
        if isinstance(value, Mapping):
            if entry.count(".") == 2 and entry.endswith(".training") and not (value and set(value) <= set(shapes)):
                raise refuse(entry, f"holds {sorted(map(str, value))}, not training weights of Gaussian parameters")
            if value and set(value) <= set(shapes):
                for name, tensor in value.items():
                    _tensor(refuse, f"{entry}.{name}", tensor, shapes[name])
                return
            for key, item in value.items():
                walk(item, f"{entry}.{key}")
        elif isinstance(value, torch.Tensor):
            _tensor(refuse, entry, value, dtype=None)

    for key, state in hooks.items():
        walk(state, f"hooks.{key}")
