"""Data-parallel training over ``torch.distributed`` (launched with torchrun): the rank context,
gradient and statistics reduction, and the split of validation views."""

from .context import DistContext, RankConsole
from .sync import all_reduce_flat, parameter_checksums

__all__ = ["DistContext", "RankConsole", "all_reduce_flat", "parameter_checksums"]
