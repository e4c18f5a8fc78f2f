"""Photos checked before COLMAP sees them: each must decode, within a pixel limit.

COLMAP aborts the whole process (a C++ assertion) on some files a folder of photos may hold: a
file named ``.jpg`` that is not an image, a header declaring 60000 x 60000 pixels. Each photo is
opened with Pillow, its size read from the header and compared with the limit before any pixel
is decoded, then decoded (JPEG at 1/8 scale: the whole compressed stream is still read, at a
fraction of the cost), so a truncated or corrupt file is found too.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable, Dict, List, Tuple


def photo_problem(path: Path, max_pixels: int) -> str | Tuple[int, int]:
    """Why the photo at ``path`` cannot be used, or its (width, height) when it can."""
    from PIL import Image

    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None  # the limit here is ours, checked first
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow's notes on odd files: the outcome below says enough
            with Image.open(path) as image:
                width, height = image.size
                if width < 1 or height < 1:
                    return f"{width}x{height} pixels"
                if width * height > max_pixels:
                    return (f"{width}x{height} pixels, over the limit of {max_pixels / 1e6:g} megapixels "
                            "(--max-megapixels)")
                image.draft("RGB", (max(1, width // 8), max(1, height // 8)))
                image.load()
    except OSError as err:  # also Pillow's UnidentifiedImageError, truncated and corrupt data
        why = (str(err).splitlines() or [type(err).__name__])[0].replace(f" '{path}'", "").replace(str(path), "")
        return f"not a readable image ({why[:100]})"
    except (ValueError, SyntaxError, MemoryError, EOFError) as err:
        return f"not a readable image ({type(err).__name__})"
    finally:
        Image.MAX_IMAGE_PIXELS = limit
    return width, height


def check_photos(folder: Path, names: List[str], max_pixels: int, progress: Callable[[int], None],
                 stop: Callable[[], None]) -> Tuple[Dict[str, Tuple[int, int]], Dict[str, str]]:
    """(each photo that can be used with its (width, height), each other one with the reason);
    ``stop()`` is called between photos (it raises to interrupt)."""
    usable: Dict[str, Tuple[int, int]] = {}
    refused: Dict[str, str] = {}
    for index, name in enumerate(names, start=1):
        problem = photo_problem(folder / name, max_pixels)
        if isinstance(problem, str):
            refused[name] = problem
        else:
            usable[name] = problem
        progress(index)
        stop()
    return usable, refused


def describe_refused(refused: Dict[str, str], shown: int = 4) -> str:
    """``refused`` as part of one line: the first ``shown`` names with their reasons, then a count."""
    items = sorted(refused.items())
    text = "; ".join(f"{name}: {why}" for name, why in items[:shown])
    return text + (f"; and {len(items) - shown} more" if len(items) > shown else "")
