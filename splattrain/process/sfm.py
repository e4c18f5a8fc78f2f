"""Structure from motion with pycolmap: SIFT features, matching, mapping (incremental or global).

Each stage writes to one COLMAP database, and COLMAP skips the images that already have
features and the pairs that are already matched, so a stopped or repeated run resumes
where the last one left off.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import UserError
from . import database, require
from .options import CAMERA_MODES
from .runner import run_polled

#: Neighbours each frame is matched with by the sequential matcher.
SEQUENTIAL_OVERLAP = 10

Progress = Callable[[int], None]


@dataclass(frozen=True)
class SfmOptions:
    """The structure-from-motion choices of ``splattrain process``."""

    matcher: str = "auto"
    mapper: str = "incremental"
    camera: str = "single"
    camera_model: str = "SIMPLE_RADIAL"
    device: str = "auto"


def pick_device(choice: str) -> Tuple[Any, str]:
    """(pycolmap.Device, a sentence saying what runs where). ``choice``: auto | cpu | cuda."""
    pycolmap = require("pycolmap")
    if choice == "cuda" and not pycolmap.has_cuda:
        raise UserError("--device cuda: this pycolmap was built without CUDA (pip install pycolmap-cuda12)")
    if choice != "cpu" and pycolmap.has_cuda:
        return pycolmap.Device.cuda, "GPU: this pycolmap has CUDA (SIFT extraction and matching on the GPU)"
    why = "as asked" if choice == "cpu" else "this pycolmap has no CUDA; pycolmap-cuda12 runs SIFT on an NVIDIA GPU"
    return pycolmap.Device.cpu, f"CPU ({why})"


def pick_matcher(choice: str, kind: str) -> str:
    """The matcher for ``choice``: auto is sequential for video frames (each is matched with its
    neighbours, linear in the frame count) and exhaustive for photos (every pair: no order to use)."""
    if choice != "auto":
        return choice
    return "sequential" if kind == "video" else "exhaustive"


def pairs_to_match(count: int, matcher: str) -> int:
    """How many image pairs the matcher will look at (the progress bar's total)."""
    if matcher == "exhaustive":
        return count * (count - 1) // 2
    pairs = set()
    for i in range(count):  # COLMAP's sequential pairs: i+1..i+overlap and i+2^k (quadratic overlap)
        for j in [i + d for d in range(1, SEQUENTIAL_OVERLAP + 1)] + [i + 2 ** k for k in range(SEQUENTIAL_OVERLAP)]:
            if j < count:
                pairs.add((i, j))
    return len(pairs)


def extract(db: Path, image_dir: Path, names: List[str], options: SfmOptions, device: Any, progress: Progress) -> None:
    """SIFT features of ``names`` (relative to ``image_dir``) into ``db``; images that already
    have features there are skipped."""
    pycolmap = require("pycolmap")
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = options.camera_model
    mode = getattr(pycolmap.CameraMode, CAMERA_MODES[options.camera])
    token = pycolmap.CancellationToken()
    run_polled(lambda tok: pycolmap.extract_features(db, image_dir, image_names=names, camera_mode=mode,
                                                     reader_options=reader, device=device, cancellation_token=tok),
               token, lambda: database.count(db, "keypoints"), progress)


def match(db: Path, matcher: str, device: Any, progress: Progress) -> None:
    """Match and verify the image pairs of ``matcher`` (exhaustive | sequential); pairs already
    matched in ``db`` are skipped."""
    pycolmap = require("pycolmap")
    token = pycolmap.CancellationToken()
    if matcher == "exhaustive":
        call = lambda tok: pycolmap.match_exhaustive(db, device=device, cancellation_token=tok)  # noqa: E731
    else:
        pairing = pycolmap.SequentialPairingOptions()
        pairing.overlap = SEQUENTIAL_OVERLAP
        call = lambda tok: pycolmap.match_sequential(db, pairing_options=pairing, device=device,  # noqa: E731
                                                     cancellation_token=tok)
    run_polled(call, token, lambda: database.count(db, "matches"), progress)


def map_scene(db: Path, image_dir: Path, out: Path, mapper: str, progress: Progress) -> Dict[int, Any]:
    """The models mapping finds (``out/N`` each), largest first; ``progress`` counts registered images.

    ``global`` uses pycolmap's global mapper (GLOMAP) where this pycolmap has it.
    """
    pycolmap = require("pycolmap")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    if mapper == "global":
        if not hasattr(pycolmap, "global_mapping"):
            raise UserError(f"--mapper global: pycolmap {pycolmap.__version__} has no global mapper; use incremental")
        models = run_polled(lambda tok: pycolmap.global_mapping(db, image_dir, out), None, lambda: None, progress)
    else:
        registered = [1]

        def next_image() -> None:
            registered[0] += 1
            progress(registered[0])

        token = pycolmap.CancellationToken()
        models = run_polled(
            lambda tok: pycolmap.incremental_mapping(db, image_dir, out, next_image_callback=next_image,
                                                     cancellation_token=tok),
            token, lambda: None, progress)
    return dict(sorted(models.items(), key=lambda item: -item[1].num_reg_images()))


def left_out(db: Path, names: List[str], models: Dict[int, Any], kept: int) -> Dict[str, str]:
    """Each image that is not in model ``kept``, with the reason."""
    in_model = {image.name for image in models[kept].images.values() if image.has_pose} if models else set()
    elsewhere = {image.name: index for index, model in models.items() if index != kept
                 for image in model.images.values() if image.has_pose}
    features = database.images_with_features(db)
    verified = database.verified_images(db, require("pycolmap").IncrementalPipelineOptions().min_num_matches)
    reasons = {}
    for name in names:
        if name in in_model:
            continue
        if features.get(name, 0) == 0:
            reasons[name] = "no features (unreadable, blank or tiny image)"
        elif name not in verified:
            reasons[name] = "no verified matches with any other image"
        elif name in elsewhere:
            reasons[name] = f"in a smaller, disconnected model (model {elsewhere[name]})"
        else:
            reasons[name] = "too few matches with the reconstructed points to be registered"
    return reasons


def mean_reprojection_error(model: Any) -> float:
    """Mean reprojection error of the model's points, in pixels."""
    return float(model.compute_mean_reprojection_error())
