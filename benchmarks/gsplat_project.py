"""A NeRF-synthetic (Blender) scene as the COLMAP project gsplat's example trainer reads (a module
bench_gpu_trainers.py uses).

gsplat's ``examples/simple_trainer.py`` reads COLMAP projects only, drops an image's alpha channel
and renders over black. The project therefore holds:

- the scene's training views composited over black, the background gsplat renders with (the
  Gaussians then learn the scene's own transparency; splattrain scores them over the preset's white);
- one PINHOLE camera per image size and each view's pose, as splattrain's Blender reader has them;
- as sparse points, the centres and colours of the Gaussians splattrain's preset starts from (its
  random init), so that both trainers start from the same points;
- one test view, first by name: gsplat holds out every ``test_every``-th image counted from the
  first, so with ``test_every`` equal to the number of images that view alone is held out and every
  training view is trained on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

HELD_OUT = "000_held_out_"  # sorts before "train_": gsplat's image 0, the one it holds out


def over_black(pixels: np.ndarray) -> np.ndarray:
    """uint8 RGB of an RGB or RGBA image composited over black."""
    if pixels.shape[-1] == 3:
        return pixels
    alpha = pixels[..., 3:].astype(np.float32) / 255.0
    return np.round(pixels[..., :3].astype(np.float32) * alpha).astype(np.uint8)


def starting_points(cfg, cameras) -> Tuple[np.ndarray, np.ndarray]:
    """The centres (float32 [N, 3]) and uint8 colours of the Gaussians ``cfg``'s run starts from."""
    from splattrain.data.pipeline import focus_point
    from splattrain.model.gaussians import SH_C0
    from splattrain.model.init import random_gaussians

    model = random_gaussians(cfg.model.init, int(cfg.model.sh_degree), focus_point(cameras), int(cfg.seed))
    colors = (model.params["sh0"][:, 0, :].detach() * SH_C0 + 0.5).clamp(0, 1).numpy()
    return model.means.detach().numpy(), np.round(colors * 255.0).astype(np.uint8)


def write_project(cfg, folder: Path) -> int:
    """Write the project of ``cfg``'s scene (a Blender scene's config) into ``folder`` (``images/``
    and ``sparse/0/``); returns gsplat's ``test_every`` for it (the number of images)."""
    from PIL import Image

    from splattrain.data.colmap_model import ColmapCamera, ColmapImage
    from splattrain.data.colmap_write import write_model
    from splattrain.data.loading import load_scene

    scene = load_scene(cfg.data)[1]
    views = [(f"{HELD_OUT}{scene.test[0].name}.png", scene.test[0])]
    views += [(f"train_{frame.name}.png", frame) for frame in scene.train]
    (folder / "images").mkdir(parents=True, exist_ok=True)
    intrinsics: Dict[tuple, int] = {}
    images: List[ColmapImage] = []
    for index, (name, frame) in enumerate(views, start=1):
        Image.fromarray(over_black(frame.pixels())).save(folder / "images" / name)
        camera = frame.camera
        K = camera.K.double().numpy()
        key = (int(camera.width), int(camera.height), K[0, 0], K[1, 1], K[0, 2], K[1, 2])
        camera_id = intrinsics.setdefault(key, len(intrinsics) + 1)
        images.append(ColmapImage.from_viewmat(index, name, camera_id, camera.viewmat.double().numpy()))
    cameras = [ColmapCamera(i, "PINHOLE", key[0], key[1], tuple(float(v) for v in key[2:]))
               for key, i in intrinsics.items()]
    points, colors = starting_points(cfg, [frame.camera for frame in scene.train])
    write_model(folder / "sparse" / "0", cameras, images, points.astype(np.float64), colors)
    return len(views)
