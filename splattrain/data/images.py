"""Image and mask files decoded to uint8 / bool arrays, resized, and read on several threads."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, TypeVar

import numpy as np
from PIL import Image

from .. import interrupts
from ..errors import DataError

T = TypeVar("T")
R = TypeVar("R")

_IF_MISSING = {
    "image": "restore the file or fix the path that refers to it",
    "mask": "add it, or set data.masks=none to train without masks",
}


#: Modes with an alpha channel (LAB's "A" is a colour axis).
_ALPHA_MODES = ("RGBA", "RGBa", "LA", "La", "PA")


@contextmanager
def _opened(path: Path, what: str, kind: str = "image") -> Iterator[Image.Image]:
    """``Image.open(path)``, with a missing or undecodable file turned into a DataError.

    ``what`` (e.g. "image 'a.jpg' (id 3) in .../images.bin") is added to the message.
    """
    context = f" ({what})" if what else ""
    if not path.is_file():
        raise DataError(f"{path}: {kind} not found{context}; {_IF_MISSING[kind]}")
    try:
        with Image.open(path) as image:
            yield image
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as err:
        raise DataError(f"{path}: cannot read {kind} ({err}){context}; replace or re-export the file") from err


def read_image(path: Path, what: str = "") -> np.ndarray:
    """Decode ``path`` fully into uint8 RGB or RGBA [H, W, C] (read-only, no extra copy)."""
    with _opened(path, what) as image:
        image.load()
        if image.mode.startswith("I"):  # 16-bit (or 32-bit integer) grey: Pillow would clip it to {0, 255}
            return _wide_grey_to_rgb(image)
        if image.mode == "F":  # 32-bit float grey: Pillow would clip it too
            return _float_grey_to_rgb(image, path, what)
        if image.mode not in ("RGB", "RGBA"):
            has_alpha = image.mode in _ALPHA_MODES or "transparency" in image.info
            image = image.convert("RGBA" if has_alpha else "RGB")
        return np.asarray(image)


def _wide_grey_to_rgb(image: Image.Image) -> np.ndarray:
    """A 16-bit grey image (modes I;16*, I) scaled to uint8 RGB: 65535 -> 255."""
    values = np.asarray(image).astype(np.float64)
    scaled = np.clip(np.rint(values / 257.0), 0, 255).astype(np.uint8)
    return np.repeat(scaled[..., None], 3, axis=2)


def _float_grey_to_rgb(image: Image.Image, path: Path, what: str) -> np.ndarray:
    """A 32-bit float grey image scaled to uint8 RGB: values in [0, 1] (the float convention) map
    1.0 -> 255; larger ones are 16-bit levels, scaled as 16-bit images are (65535 -> 255)."""
    values = np.asarray(image).astype(np.float64)
    context = f" ({what})" if what else ""
    if not np.isfinite(values).all() or values.min(initial=0.0) < 0 or values.max(initial=0.0) > 65535:
        raise DataError(f"{path}: a 32-bit float image with values outside [0, 1] and [0, 65535] or NaN{context}; "
                        "convert it to an 8- or 16-bit image")
    scale = 255.0 if values.max(initial=0.0) <= 1.0 else 1.0 / 257.0
    scaled = np.clip(np.rint(values * scale), 0, 255).astype(np.uint8)
    return np.repeat(scaled[..., None], 3, axis=2)


def image_size(path: Path, what: str = "") -> tuple[int, int]:
    """(width, height) of an image file from its header, without decoding it."""
    with _opened(path, what) as image:
        return image.size


def read_mask(path: Path, what: str = "") -> np.ndarray:
    """A mask file as bool [H, W]: True (non-zero) where pixels count, False where they are ignored."""
    with _opened(path, what, kind="mask") as image:
        return np.asarray(image.convert("L")) > 0


def scaled_size(width: int, height: int, downscale: float) -> tuple[int, int]:
    """The (width, height) of an image shrunk by ``downscale`` (rounded, at least 1)."""
    return max(1, int(round(width / downscale))), max(1, int(round(height / downscale)))


def resize_image(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``image`` resized to ``size`` (width, height) with an area (box) filter; alpha is premultiplied."""
    return np.asarray(Image.fromarray(image).resize(size, Image.Resampling.BOX))


def resize_mask(mask: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bool ``mask`` resized to ``size`` (width, height), nearest neighbour."""
    return np.asarray(Image.fromarray(mask).resize(size, Image.Resampling.NEAREST))


#: Photo files a capture folder holds before structure from motion (``splattrain process`` reads these).
PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")


def worker_count(num_workers: int) -> int:
    """Decoding threads: ``num_workers``, or one per CPU core (at most 8) when it is 0."""
    return num_workers if num_workers > 0 else min(8, os.cpu_count() or 1)


def image_budget_bytes(budget_mb: Optional[float]) -> int:
    """Bytes of decoded images a scene may hold: ``data.image_budget_mb``, or a quarter of the
    machine's memory when it is null."""
    if budget_mb is not None:
        return int(budget_mb * 2**20)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 4
    except (ValueError, OSError, AttributeError):  # no sysconf: keep every image
        return 2**62


def parallel_map(fn: Callable[[T], R], items: Sequence[T], workers: int) -> list[R]:
    """``[fn(x) for x in items]`` on ``workers`` threads; the first failing item's error is raised."""
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="splattrain-decode") as pool:
        futures = [pool.submit(fn, x) for x in items]
        try:
            results = []
            for future in futures:
                results.append(future.result())
                interrupts.check()
            return results
        except BaseException:
            for future in futures:
                future.cancel()
            raise
