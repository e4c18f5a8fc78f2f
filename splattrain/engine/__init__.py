"""The training engine."""

from .trainer import DefaultTrainer

__all__ = ["DefaultTrainer"]
