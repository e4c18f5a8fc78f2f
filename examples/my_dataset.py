"""An example dataset reader: a folder with ``cameras.json`` and the images it lists.

``cameras.json`` holds ``{"frames": [{"image": "images/a.png", "K": 3x3, "world_to_camera":
4x4, "split": "train"}, ...]}``: OpenCV intrinsics in pixels and an OpenCV world-to-camera
matrix per image; ``split`` (optional) is ``train`` or ``test``, and without it every
``data.test_every``-th frame is a test view.
Load it from a config with ``imports: [examples/my_dataset.py]``; ``data.type: auto`` then
finds such folders. Convert a scene another reader reads into this format with
``python examples/my_dataset.py SOURCE_FOLDER NEW_FOLDER``. docs/extending.md walks through it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from splattrain import DATASETS, Camera, DatasetReader, DataError, Frame, SceneData


@DATASETS.register("cameras_json")
class CamerasJsonReader(DatasetReader):
    """Folders with cameras.json (OpenCV K and world-to-camera matrix per image) and the images."""

    normalize_by_default = True  # the world frame is arbitrary: centre and scale the cameras

    @classmethod
    def detect(cls, path: Path) -> bool:
        return (path / "cameras.json").is_file()

    def load(self, path, cfg) -> SceneData:
        root = Path(path)
        source = root / "cameras.json"
        try:
            frames = json.loads(source.read_text())["frames"]
        except (OSError, ValueError, KeyError) as err:
            raise DataError(f"{source}: not a cameras.json with a 'frames' list ({err})") from None
        marked = any("split" in entry for entry in frames)
        train, test = [], []
        for index, entry in enumerate(frames):
            frame = self.load_frame(root, entry, f"frame {index} of {source}", cfg.downscale)
            if marked:
                is_test = entry.get("split") == "test"
            else:
                is_test = cfg.test_every > 0 and index % cfg.test_every == 0
            (test if is_test else train).append(frame)
        if not train:
            raise DataError(f"{source}: no training views (mark some \"split\": \"train\", or raise data.test_every)")
        return SceneData(train=train, test=test, source=str(root))

    @staticmethod
    def load_frame(root: Path, entry: dict, where: str, downscale: float) -> Frame:
        try:
            file = root / entry["image"]
            K = torch.tensor(entry["K"], dtype=torch.float32).reshape(3, 3)
            viewmat = torch.tensor(entry["world_to_camera"], dtype=torch.float32).reshape(4, 4)
            image = Image.open(file)
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            raise DataError(f"{where}: needs 'image', 'K' (3x3) and 'world_to_camera' (4x4) ({err})") from None
        except OSError as err:
            raise DataError(f"{where}: cannot read its image ({err})") from None
        camera = Camera(viewmat=viewmat, K=K, width=image.width, height=image.height, name=file.stem)
        if downscale != 1.0:
            camera = camera.scaled(1.0 / downscale)
            image = image.resize((camera.width, camera.height), Image.Resampling.LANCZOS)
        pixels = np.asarray(image.convert("RGBA" if "A" in image.mode else "RGB"))
        return Frame(image=pixels, camera=camera, name=file.stem)


def save(scene: SceneData, folder: Path) -> None:
    """Write ``scene``'s views as a cameras.json folder (images as PNG, test views marked)."""
    (folder / "images").mkdir(parents=True, exist_ok=True)
    entries = []
    for split, frames in (("train", scene.train), ("test", scene.test)):
        for frame in frames:
            file = f"images/{split}_{frame.name}.png"
            Image.fromarray(frame.image).save(folder / file)
            K, viewmat = frame.camera.K.tolist(), frame.camera.viewmat.tolist()
            entries.append({"image": file, "K": K, "world_to_camera": viewmat, "split": split})
    (folder / "cameras.json").write_text(json.dumps({"frames": entries}, indent=1))


if __name__ == "__main__":
    from splattrain.data.loading import load_scene
    from splattrain.config.schema import DataConfig

    if len(sys.argv) != 3:
        sys.exit("usage: python examples/my_dataset.py SOURCE_FOLDER NEW_FOLDER")
    _, scene = load_scene(DataConfig(path=sys.argv[1], normalize=False))
    save(scene, Path(sys.argv[2]))
    print(f"wrote {len(scene.train) + len(scene.test)} views to {sys.argv[2]}")
