"""Structure from motion with pycolmap: SIFT features, matching, mapping (incremental or global).

Each stage writes to one COLMAP database; the images that already have features there and
the pairs already matched are skipped, so a stopped or repeated run resumes where the last
one left off. Features and matches are computed in chunks, one pycolmap call each, which
gives the progress bar its steps; nothing reads the database while pycolmap writes it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

from ..errors import UserError
from ..io.atomic import atomic_write_text
from . import database, require
from .options import CAMERA_MODES
from .runner import run_polled

#: Neighbours each frame is matched with by the sequential matcher.
SEQUENTIAL_OVERLAP = 10
#: Features and matches are computed in this many calls: progress, and a stop, between them.
CHUNKS = 25
#: Memory of one SIFT thread on the CPU: a fixed part plus bytes per pixel of the image it reads,
#: once shrunk to COLMAP's SIFT_MAX_SIDE (COLMAP doubles it for the first octave). Measured with
#: pycolmap 4.2: 0.2 GB of address space for an 800x800 image, 1.9 GB for 2400x2400, 3.7 GB for 3200x3200
#: (and for 6400x6400, shrunk to 3200x3200).
SIFT_THREAD_BYTES = 160 << 20
SIFT_BYTES_PER_PIXEL = 350
SIFT_MAX_SIDE = 3200

Progress = Callable[[int], None]


@dataclass(frozen=True)
class SfmOptions:
    """The structure-from-motion choices of ``splattrain process``."""

    matcher: str = "auto"
    mapper: str = "incremental"
    camera: str = "auto"
    camera_model: str = "auto"
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


def pick_cameras(camera: str, camera_model: str, kind: str) -> Tuple[str, str]:
    """(camera mode, lens model) for the choices: auto gives each photo its own camera (photos
    may differ in zoom and focus: one focal length each matched the cup's reference poses best)
    and a video's frames one shared camera (one lens, one zoom); the lens model is
    SIMPLE_PINHOLE for per-image cameras (a radial term per photo is poorly constrained) and
    SIMPLE_RADIAL for a shared one."""
    if camera == "auto":
        camera = "single" if kind == "video" else "per-image"
    if camera_model == "auto":
        camera_model = "SIMPLE_PINHOLE" if camera == "per-image" else "SIMPLE_RADIAL"
    return camera, camera_model


def pairs_to_match(names: List[str], matcher: str) -> List[Tuple[str, str]]:
    """The image pairs ``matcher`` looks at: every pair (exhaustive), or each image with its
    ``SEQUENTIAL_OVERLAP`` successors and those 2^k further on (COLMAP's sequential pairs)."""
    if matcher == "exhaustive":
        return [(a, names[j]) for i, a in enumerate(names) for j in range(i + 1, len(names))]
    steps = sorted(set(range(1, SEQUENTIAL_OVERLAP + 1)) | {2**k for k in range(SEQUENTIAL_OVERLAP)})
    return [(a, names[i + d]) for i, a in enumerate(names) for d in steps if i + d < len(names)]


def sift_threads(size: Tuple[int, int], device: Any) -> int:
    """SIFT threads whose images of ``size`` (the largest) fit in the memory this process can
    still allocate (every core when it does not say); UserError when not even one does. On a
    GPU, 0: COLMAP's choice."""
    from ..io.limits import available_memory, gib

    if getattr(device, "name", str(device)) == "cuda":
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    width, height = size
    scale = min(1.0, SIFT_MAX_SIDE / max(width, height, 1))
    per_thread = SIFT_THREAD_BYTES + SIFT_BYTES_PER_PIXEL * (width * scale) * (height * scale)
    free = available_memory()
    if free is None:
        return cores
    if free < per_thread:
        raise UserError(f"feature extraction on {width}x{height} images needs about {gib(per_thread)} of memory, "
                        f"more than the {gib(free)} available; shrink the photos (a video: --max-size)")
    return max(1, min(cores, int(free // per_thread)))


def _chunks(items: List[Any], smallest: int) -> List[List[Any]]:
    """``items`` in about ``CHUNKS`` runs of at least ``smallest`` (each pycolmap call costs a start-up)."""
    size = max(smallest, -(-len(items) // CHUNKS))
    return [items[i:i + size] for i in range(0, len(items), size)]


def extract(db: Path, image_dir: Path, names: List[str], options: SfmOptions, device: Any, progress: Progress,
            threads: int = 0) -> int:
    """SIFT features of ``names`` (relative to ``image_dir``) into ``db``, in chunks (progress and
    Ctrl-C between and within them), on ``threads`` threads (0: one per core); images that
    already have features are skipped. Returns how many were reused."""
    pycolmap = require("pycolmap")
    done = {name for name, count in database.images_with_features(db).items() if count > 0}
    todo = [name for name in names if name not in done]
    reused = len(names) - len(todo)
    progress(reused)
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = options.camera_model
    extraction = pycolmap.FeatureExtractionOptions()
    extraction.num_threads = threads or -1
    mode = getattr(pycolmap.CameraMode, CAMERA_MODES[options.camera])
    groups = _chunks(todo, 8) if options.camera != "per-folder" else _by_folder(todo)
    finished = reused
    for group in groups:
        if options.camera == "single":  # later chunks (and resumed runs) keep the first camera
            camera = database.camera_of(db, next(iter(done), None) or names[0])
            if camera is not None:
                reader.existing_camera_id = camera
        run_polled(lambda tok: pycolmap.extract_features(db, image_dir, image_names=group, camera_mode=mode,
                                                         reader_options=reader, extraction_options=extraction,
                                                         device=device, cancellation_token=tok),
                   pycolmap.CancellationToken(), lambda: None, progress, stage="feature extraction")
        finished += len(group)
        progress(finished)
    return reused


def _by_folder(names: List[str]) -> List[List[str]]:
    folders: Dict[str, List[str]] = {}
    for name in names:
        folders.setdefault(name.rpartition("/")[0], []).append(name)
    return list(folders.values())


def match(db: Path, pairs: List[Tuple[str, str]], device: Any, work: Path, progress: Progress) -> int:
    """Match and verify ``pairs`` in chunks; pairs already matched in ``db`` are skipped, and so
    are pairs with an image COLMAP could not read (it has no features: reported as left out).
    Returns how many were reused."""
    pycolmap = require("pycolmap")
    ids = database.image_ids(db)
    done = database.matched_pairs(db)
    pairs = [(a, b) for a, b in pairs if a in ids and b in ids]
    todo = [(a, b) for a, b in pairs if tuple(sorted((ids[a], ids[b]))) not in done]
    reused = len(pairs) - len(todo)
    progress(reused)
    listing = work / "pairs.txt"
    finished = reused
    for group in _chunks(todo, 100):
        atomic_write_text(listing, "".join(f"{a} {b}\n" for a, b in group))
        pairing = pycolmap.ImportedPairingOptions()
        pairing.match_list_path = str(listing)
        run_polled(lambda tok: pycolmap.match_image_pairs(db, pairing_options=pairing, device=device,
                                                          cancellation_token=tok),
                   pycolmap.CancellationToken(), lambda: None, progress, stage="matching")
        finished += len(group)
        progress(finished)
    listing.unlink(missing_ok=True)
    return reused


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
        models = run_polled(lambda tok: pycolmap.global_mapping(db, image_dir, out), None, lambda: None, progress,
                            stage="mapping")
    else:
        registered = [1]

        def next_image() -> None:
            registered[0] += 1
            progress(registered[0])

        token = pycolmap.CancellationToken()
        models = run_polled(
            lambda tok: pycolmap.incremental_mapping(db, image_dir, out, next_image_callback=next_image,
                                                     cancellation_token=tok),
            token, lambda: None, progress, stage="mapping")
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
