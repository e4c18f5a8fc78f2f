"""Images as the writers store them: 8-bit RGB, and PNG bytes encoded for speed."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

#: zlib level of the PNGs the writers make: 1 encodes a validation grid 2-3x faster than PIL's
#: default 6, for files about 15% larger (lossless either way).
PNG_COMPRESS_LEVEL = 1


def to_uint8(image: np.ndarray) -> np.ndarray:
    """``image`` [H, W, 3] as uint8: floats in [0, 1] are clipped and rounded; uint8 is kept."""
    if image.dtype == np.uint8:
        return image
    return (np.clip(image, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def png_bytes(image: np.ndarray) -> bytes:
    """``image`` [H, W, 3] (uint8, or floats in [0, 1]) encoded as a PNG file's bytes."""
    buffer = io.BytesIO()
    Image.fromarray(to_uint8(image)).save(buffer, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return buffer.getvalue()
