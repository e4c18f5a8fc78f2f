"""Densification strategies: the protocol, the 3DGS default, MCMC, and the ops they share."""

from . import ops
from .budget import BudgetStrategy
from .build import build_strategy
from .default import DefaultStrategy
from .mcmc import MCMCStrategy
from .protocol import ReindexListener, SceneFacts, Strategy

__all__ = ["BudgetStrategy", "DefaultStrategy", "MCMCStrategy", "ReindexListener", "SceneFacts", "Strategy", "build_strategy", "ops"]
