"""The dvclive writer against the real package, run as a script in dvclive's own package folder.

dvclive brings all of dvc, whose hydra-core caps omegaconf below 2.4, while splattrain is
tested with omegaconf 2.4; so scripts/setup.sh installs dvclive into ``<venv>/dvclive-packages``
and tests/test_writers.py runs this file with that folder first on PYTHONPATH.

    python tests/dvclive_check.py WORK_DIR      (exit code 0 when every check holds)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from splattrain.writers.dvclive_writer import DvcliveWriter  # noqa: E402


def check(work: Path) -> None:
    os.chdir(work)  # dvclive initialises DVC in the Git repository around the working directory
    writer = DvcliveWriter(work / "run")
    writer.write_config({"trainer": {"max_steps": 30}, "name": "t"}, "name: t\n")
    writer.write_scalars({"train/loss": 0.5, "val/psnr": float("nan")}, 10)
    writer.write_scalars({"train/loss": 0.25, "val/psnr": 21.5}, 20)
    writer.write_image("val/r_0", np.full((4, 5, 3), 0.5, np.float32), 20)
    writer.flush()
    writer.close()
    live = work / "run" / "dvclive"
    rows = (live / "plots" / "metrics" / "train" / "loss.tsv").read_text().split()
    assert rows == ["step", "loss", "10", "0.5", "20", "0.25"], rows
    assert (live / "plots" / "metrics" / "val" / "psnr.tsv").read_text().split() == ["step", "psnr", "20", "21.5"]
    assert json.loads((live / "metrics.json").read_text()) == {"train": {"loss": 0.25}, "val": {"psnr": 21.5}, "step": 20}
    assert yaml.safe_load((live / "params.yaml").read_text()) == {"trainer": {"max_steps": 30}, "name": "t"}
    assert "plots/metrics" in (live / "dvc.yaml").read_text()
    image = np.asarray(Image.open(live / "plots" / "images" / "val" / "r_0" / "000020.png"))
    assert image.shape == (4, 5, 3) and int(image[0, 0, 0]) == 128


if __name__ == "__main__":
    check(Path(sys.argv[1]))
    print("dvclive writer: all checks hold")
