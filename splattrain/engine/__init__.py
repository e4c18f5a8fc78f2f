"""The training engine."""

from .run_config import RunConfig, load_config, load_run_config
from .trainer import DefaultTrainer

__all__ = ["DefaultTrainer", "RunConfig", "load_config", "load_run_config"]
