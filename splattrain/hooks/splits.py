"""The views a hook's validation metric follows: the test views or the held-out validation views."""

from __future__ import annotations

from ..errors import ConfigError
from ..protocol import Trainer

#: ``split`` values: test (``psnr``, ...) or val (``val_psnr``, ...: the views ``data.val_split`` holds out).
SPLITS = ("test", "val")


def metric_key(metric: str, split: str, who: str) -> str:
    """The key of the validation metrics ``metric`` of ``split`` is found under (ConfigError naming ``who``)."""
    if split not in SPLITS:
        raise ConfigError(f"{who} split {split!r}: use 'test' (the test views) or 'val' (data.val_split's views)")
    return metric if split == "test" else f"val_{metric}"


def check_split(key: str, trainer: Trainer) -> None:
    """Refuse a ``val_`` metric in a run that holds no validation views out of training."""
    if key.startswith("val_") and not trainer.data.val_frames:
        raise ConfigError(f"split 'val' follows the views data.val_split holds out of training, and this run "
                          f"holds out none; set data.val_split (e.g. 8: every 8th training view) or use split: test")
