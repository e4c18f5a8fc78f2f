"""Numbers and paths a config must hold before anything is built: finite, in range, usable."""

from __future__ import annotations

import math
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ..errors import ConfigError

#: The highest SH degree every renderer supports.
MAX_SH_DEGREE = 4
#: The longest run (and the largest step-valued setting) a config may ask for.
MAX_STEPS = 10_000_000


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_numbers(cfg: DictConfig, source: str) -> None:
    """Refuse NaN / inf / negative learning rates, out-of-range loss weights, an SH degree no
    renderer supports, an empty random initialisation and an empty ``output_dir`` or
    ``checkpoint_dir`` (ConfigError naming ``source`` and the key). Where those folders lie (never
    the root, the current folder or one above it) is checked by the run folder before it is locked."""

    def refuse(key: str, value: Any, expected: str) -> None:
        raise ConfigError(f"{source}: key '{key}' must be {expected}, got {value!r}")

    for name, value in cfg.optim.items():
        if str(name).endswith(("_lr", "_lr_final")) and not (_number(value) and math.isfinite(value) and value >= 0):
            refuse(f"optim.{name}", value, "a finite number >= 0")
    if not (math.isfinite(cfg.optim.eps) and cfg.optim.eps > 0):
        refuse("optim.eps", cfg.optim.eps, "a finite number > 0")
    ssim_lambda = cfg.loss.ssim_lambda
    if ssim_lambda is not None and not (math.isfinite(ssim_lambda) and 0 <= ssim_lambda <= 1):
        refuse("loss.ssim_lambda", ssim_lambda, "in [0, 1]")
    for index, term in enumerate(cfg.loss.terms or []):
        weight = term.get("weight", 1.0) if isinstance(term, DictConfig) else None
        if weight is not None and not (_number(weight) and math.isfinite(weight) and weight >= 0):
            refuse(f"loss.terms[{index}].weight", weight, "a finite number >= 0")
    if cfg.model.sh_degree > MAX_SH_DEGREE:
        refuse("model.sh_degree", cfg.model.sh_degree, f"at most {MAX_SH_DEGREE} (what the renderers support)")
    if cfg.model.init.num_points < 1:
        refuse("model.init.num_points", cfg.model.init.num_points, ">= 1")
    init = cfg.model.init
    if not (math.isfinite(init.opacity) and 0 < init.opacity < 1):
        refuse("model.init.opacity", init.opacity, "in (0, 1) (an opacity; its logit is trained)")
    for key in ("extent", "scale_factor"):
        if not (math.isfinite(init[key]) and init[key] > 0):
            refuse(f"model.init.{key}", init[key], "a finite number > 0")
    background = list(cfg.data.background)
    if len(background) != 3 or not all(_number(v) and math.isfinite(v) and 0 <= v <= 1 for v in background):
        refuse("data.background", background, "3 numbers in [0, 1] (RGB)")
    if not 0 <= cfg.seed < 2**63:
        refuse("seed", cfg.seed, "in [0, 2^63)")
    if not (math.isfinite(cfg.trainer.steps_scaler) and cfg.trainer.steps_scaler > 0):
        refuse("trainer.steps_scaler", cfg.trainer.steps_scaler, "a finite number > 0")
    if cfg.trainer.max_steps > MAX_STEPS:
        refuse("trainer.max_steps", cfg.trainer.max_steps, f"at most {MAX_STEPS}")
    for key, default in (("output_dir", "outputs/<name>"), ("checkpoint_dir", "<output_dir>/ckpt")):
        folder = OmegaConf.select(cfg, key)
        if folder is not None and not str(folder).strip():
            refuse(key, folder, f"a folder name (null for {default})")
