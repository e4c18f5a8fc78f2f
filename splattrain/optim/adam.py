"""Adam for the Gaussian parameter groups, stepped in one compiled pass over all groups.

:class:`GaussianAdam` keeps ``torch.optim.Adam``'s state layout (``param_groups``, ``state[param]``
with ``step`` / ``exp_avg`` / ``exp_avg_sq``, the same ``state_dict``), so densification strategies
that edit optimizer state and checkpoints written by either optimizer work with both. Its step is
``torch.optim.Adam``'s arithmetic (no weight decay, no amsgrad), done by the CPU library's
``splat_adam_step_f32`` for float32 CPU tensors (one read and one write of each parameter, gradient
and moment) and by PyTorch operations otherwise. It also never imports ``torch._dynamo``, which
constructing a ``torch.optim.Adam`` does (seconds of start-up on a small machine).

With ``sparse=True`` only the Gaussians seen this step (``info["radii"] > 0`` in some camera) are
updated, as gsplat's ``SelectiveAdam`` and Taming-3DGS do: the others keep their parameters and
moments. A step whose Gaussian count changed after rendering (densification) updates every row.
"""

from __future__ import annotations

import ctypes
import math
from collections import defaultdict
from typing import Any, Dict, Iterable, List, Optional, Sequence

import torch
from torch import Tensor

from ..kernels.threads import loop_threads

#: The hyperparameters torch.optim.Adam keeps per group (so state dicts are interchangeable).
ADAM_DEFAULTS: Dict[str, Any] = {
    "lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0, "amsgrad": False, "maximize": False,
    "foreach": None, "capturable": False, "differentiable": False, "fused": None, "decoupled_weight_decay": False,
}


class GaussianAdam:
    """``torch.optim.Adam``-compatible optimizer for one Gaussian parameter group.

    Args:
        param_groups: ``[{"params": [param], "lr": ..., "name": ...}]`` as for torch.optim.Adam.
        eps: Adam's epsilon.
        library: the loaded CPU library (``build.load_library()``) for the compiled step, or None
            to step with PyTorch operations.
        sparse: update only the Gaussians visible this step (see the module docstring).
    """

    def __init__(self, param_groups: Sequence[Dict[str, Any]], eps: float = 1e-8, library: Any = None,
                 sparse: bool = False) -> None:
        self.defaults = {**ADAM_DEFAULTS, "eps": eps}
        self.param_groups: List[Dict[str, Any]] = [
            {**self.defaults, **{k: v for k, v in group.items() if k != "params"}, "params": list(group["params"])}
            for group in param_groups
        ]
        self.state: Dict[Tensor, Dict[str, Any]] = defaultdict(dict)
        self.library = library
        self.sparse = sparse

    def step(self, visible: Optional[Tensor] = None) -> None:
        """One Adam step of every parameter that has a gradient (``visible``: see :func:`step_adam`)."""
        step_adam([self], visible)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop (or zero) the gradients."""
        for group in self.param_groups:
            for param in group["params"]:
                if set_to_none:
                    param.grad = None
                elif param.grad is not None:
                    param.grad.zero_()

    def state_dict(self) -> Dict[str, Any]:
        """The state in ``torch.optim.Adam.state_dict()``'s layout (parameters numbered in order)."""
        state, groups, index = {}, [], 0
        for group in self.param_groups:
            numbers = []
            for param in group["params"]:
                if param in self.state and self.state[param]:
                    state[index] = dict(self.state[param])
                numbers.append(index)
                index += 1
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": numbers})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` (or ``torch.optim.Adam.state_dict()``) returned."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
            len(g["params"]) != len(own["params"]) for g, own in zip(groups, self.param_groups)
        ):
            raise ValueError("the loaded state dict does not match this optimizer's parameter groups")
        self.state = defaultdict(dict)
        for saved, own in zip(groups, self.param_groups):
            for number, param in zip(saved["params"], own["params"]):
                entry = state_dict["state"].get(number)
                if entry is None:
                    continue
                self.state[param] = {
                    key: value.clone() if key == "step" else value.to(dtype=param.dtype, device=param.device).clone()
                    for key, value in entry.items()
                }
            own.update({k: v for k, v in saved.items() if k != "params"})


def visible_gaussians(infos: Iterable[Dict[str, Any]]) -> Optional[Tensor]:
    """Gaussians with a positive radius in any camera of any render ([N] bool), or None."""
    mask = None
    for info in infos:
        radii = info.get("radii")
        if radii is None:
            return None
        seen = radii > 0
        if seen.dim() == 3:  # [C, N, 2]
            seen = seen.all(dim=-1)
        seen = seen.reshape(-1, seen.shape[-1]).any(dim=0)
        mask = seen if mask is None or mask.shape != seen.shape else mask | seen
    return mask


def _entries(optimizers: Iterable[GaussianAdam]) -> List[tuple]:
    """(optimizer, group, param, state, step_size, bias_correction2_sqrt) per parameter with a
    gradient, its step counter advanced (torch.optim.Adam's bookkeeping)."""
    entries = []
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = optimizer.state[param]
                if not state:
                    state["step"] = torch.tensor(0.0, device="cpu")  # a host counter, as torch.optim.Adam keeps it
                    state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                state["step"] += 1
                step = state["step"].item()
                beta1, beta2 = group["betas"]
                step_size = group["lr"] / (1 - beta1**step)
                entries.append((optimizer, group, param, state, step_size, math.sqrt(1 - beta2**step)))
    return entries


def _compiled(entry: tuple) -> bool:
    optimizer, _, param, state, _, _ = entry
    if optimizer.library is None:
        return False
    shape = param.shape
    for t in (param, param.grad, state["exp_avg"], state["exp_avg_sq"]):
        if t.dtype != torch.float32 or t.device.type != "cpu" or not t.is_contiguous() or t.shape != shape:
            return False
    return True


@torch.no_grad()
def step_adam(optimizers: Iterable[GaussianAdam], visible: Optional[Tensor] = None) -> None:
    """One Adam step of every :class:`GaussianAdam` in ``optimizers``, all in one library call
    where they can be. ``visible`` [N] bool restricts sparse optimizers to those Gaussians (rows
    of every parameter); None, or a mask of another length, updates every row."""
    entries = _entries(optimizers)
    entries = [e for e in entries if e[2].numel() > 0]  # (the step counter still advances, as in torch)
    compiled = []
    for entry in entries:
        if _compiled(entry):
            compiled.append(entry)
        else:
            _step_torch(entry, _rows(entry, visible))
    if not compiled:
        return
    masks = {_rows(e, visible) is not None for e in compiled}
    if len(masks) > 1:  # sparse and dense groups together: two calls
        for entry in compiled:
            _step_compiled([entry], _rows(entry, visible))
        return
    _step_compiled(compiled, _rows(compiled[0], visible))


def _rows(entry: tuple, visible: Optional[Tensor]) -> Optional[Tensor]:
    optimizer, _, param, _, _, _ = entry
    if not optimizer.sparse or visible is None or param.dim() == 0 or visible.shape[0] != param.shape[0]:
        return None
    return visible


def _step_compiled(entries: List[tuple], visible: Optional[Tensor]) -> None:
    count = len(entries)
    pointers = [(ctypes.c_void_p * count)(*(t.data_ptr() for t in tensors)) for tensors in zip(
        *((param, param.grad, state["exp_avg"], state["exp_avg_sq"]) for _, _, param, state, _, _ in entries)
    )]
    rows = [param.shape[0] if param.dim() else 1 for _, _, param, _, _, _ in entries]
    row_sizes = [param.numel() // max(r, 1) for r, (_, _, param, _, _, _) in zip(rows, entries)]
    scalars: List[float] = []
    for _, group, _, _, step_size, bc2_sqrt in entries:
        scalars += [step_size, group["betas"][0], group["betas"][1], bc2_sqrt, group["eps"]]
    mask = None if visible is None else visible.to(device="cpu", dtype=torch.uint8).contiguous()
    entries[0][0].library.handle.splat_adam_step_f32(
        *pointers, (ctypes.c_int64 * count)(*rows), (ctypes.c_int64 * count)(*row_sizes),
        (ctypes.c_double * len(scalars))(*scalars), count,
        None if mask is None else mask.data_ptr(), loop_threads(),
    )


def _step_torch(entry: tuple, visible: Optional[Tensor]) -> None:
    """torch.optim.Adam's single-tensor arithmetic (on the visible rows only, when given)."""
    _, group, param, state, step_size, bc2_sqrt = entry
    beta1, beta2 = group["betas"]
    tensors = [param, param.grad, state["exp_avg"], state["exp_avg_sq"]]
    rows = None
    if visible is not None:
        rows = visible.to(param.device).nonzero().squeeze(1)
        tensors = [t.index_select(0, rows) for t in tensors]
    value, grad, exp_avg, exp_avg_sq = tensors
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(group["eps"])
    value.addcdiv_(exp_avg, denom, value=-step_size)
    if rows is not None:
        for target, source in zip((param, state["exp_avg"], state["exp_avg_sq"]), (value, exp_avg, exp_avg_sq)):
            target.index_copy_(0, rows, source)
