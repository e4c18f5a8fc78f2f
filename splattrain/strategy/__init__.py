"""Densification strategies: the protocol, the 3DGS default, MCMC, and the ops they share."""

from . import ops
from .build import build_strategy
from .default import DefaultStrategy
from .mcmc import MCMCStrategy
from .protocol import ReindexListener, Strategy

__all__ = ["DefaultStrategy", "MCMCStrategy", "ReindexListener", "Strategy", "build_strategy", "ops"]
