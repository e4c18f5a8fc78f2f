"""A few views of the shared NeRF-synthetic lego scene, copied into a folder of a test's own (test helper)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Sequence

from conftest import SHARED

LEGO = SHARED / "scenes" / "lego"


def lego_subset(folder: Path, train: Sequence[int], test: Sequence[int]) -> Path:
    """``folder`` holding the lego frames ``train`` and ``test`` (indices into its transforms files),
    their PNGs copied byte for byte, and no ``transforms_val.json``, as in the shared copy."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, chosen in (("train", train), ("test", test)):
        meta = json.loads((LEGO / f"transforms_{split}.json").read_text())
        frames = [meta["frames"][index] for index in chosen]
        (folder / split).mkdir(exist_ok=True)
        for frame in frames:
            name = Path(frame["file_path"]).name + ".png"
            shutil.copyfile(LEGO / split / name, folder / split / name)
        (folder / f"transforms_{split}.json").write_text(json.dumps({**meta, "frames": frames}))
    return folder
