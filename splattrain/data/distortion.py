"""Lens distortion (COLMAP / OpenCV models) and undistortion to a pinhole camera by resampling."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Distortion:
    """A distortion model in normalised camera coordinates (x = X/Z, y = Y/Z).

    Attributes:
        radial: k1, k2, ...: the radius is scaled by 1 + k1 r^2 + k2 r^4 + ... (fisheye:
            the angle theta = atan(r) becomes theta (1 + k1 theta^2 + k2 theta^4 + ...)).
        rational: k4, k5, k6 of OpenCV's rational model: that factor is divided by
            1 + k4 r^2 + k5 r^4 + k6 r^6.
        tangential: p1, p2 (OpenCV's tangential terms).
        fisheye: the equidistant fisheye model of OpenCV and COLMAP's OPENCV_FISHEYE.
    """

    radial: tuple[float, ...] = ()
    rational: tuple[float, ...] = ()
    tangential: tuple[float, float] = (0.0, 0.0)
    fisheye: bool = False

    @property
    def is_identity(self) -> bool:
        """True for a plain pinhole camera."""
        return not self.fisheye and not any(self.radial) and not any(self.rational) and not any(self.tangential)

    def apply(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distorted normalised coordinates of the undistorted ones ``(x, y)``."""
        r2 = x * x + y * y
        if self.fisheye:
            r = np.sqrt(r2)
            theta = np.arctan(r)
            factor = _polynomial(theta * theta, self.radial) * np.where(r > 1e-12, theta / np.maximum(r, 1e-12), 1.0)
            return x * factor, y * factor
        factor = _polynomial(r2, self.radial) / _polynomial(r2, self.rational)
        p1, p2 = self.tangential
        xd = x * factor + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x)
        yd = y * factor + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y
        return xd, yd


def _polynomial(r2: np.ndarray, coefficients: tuple[float, ...]) -> np.ndarray:
    """1 + c1 r2 + c2 r2^2 + ... (Horner's scheme)."""
    total = np.zeros_like(r2)
    for c in reversed(coefficients):
        total = (total + c) * r2
    return total + 1.0


class Undistorter:
    """Resamples the images of one distorted camera into the pinhole camera with the same K and size.

    Output pixels whose source falls outside the distorted image are marked invalid
    (``valid``) so they can be masked out of the loss and the metrics.
    """

    def __init__(self, K: np.ndarray, distortion: Distortion, width: int, height: int) -> None:
        fx, fy, cx, cy = float(K[0, 0]), float(K[1, 1]), float(K[0, 2]), float(K[1, 2])
        u, v = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
        xd, yd = distortion.apply((u - cx) / fx, (v - cy) / fy)
        su = fx * xd + cx - 0.5  # source position in pixel-index units (pixel centres at integers)
        sv = fy * yd + cy - 0.5
        self.valid = (su >= -0.5) & (su <= width - 0.5) & (sv >= -0.5) & (sv <= height - 0.5)
        x0 = np.clip(np.floor(su), 0, width - 2)
        y0 = np.clip(np.floor(sv), 0, height - 2)
        self._wx = np.clip(su - x0, 0.0, 1.0).astype(np.float32).reshape(-1, 1)
        self._wy = np.clip(sv - y0, 0.0, 1.0).astype(np.float32).reshape(-1, 1)
        self._index = (y0 * width + x0).astype(np.intp).ravel()
        self._width = width
        self.shape = (height, width)

    def _sample(self, flat: np.ndarray) -> np.ndarray:
        """Bilinear samples [H*W, C] float32 of ``flat`` [H*W, C]."""
        i, w = self._index, self._width
        top = flat[i] * (1.0 - self._wx) + flat[i + 1] * self._wx
        bottom = flat[i + w] * (1.0 - self._wx) + flat[i + w + 1] * self._wx
        return top * (1.0 - self._wy) + bottom * self._wy

    def image(self, image: np.ndarray) -> np.ndarray:
        """The undistorted uint8 image [H, W, C] of a distorted uint8 ``image`` [H, W, C]."""
        channels = image.shape[2]
        out = self._sample(image.reshape(-1, channels).astype(np.float32))
        return np.round(out).astype(np.uint8).reshape(*self.shape, channels)

    def mask(self, mask: np.ndarray) -> np.ndarray:
        """The undistorted bool mask [H, W] of ``mask`` [H, W], False outside the source image."""
        sampled = self._sample(mask.reshape(-1, 1).astype(np.float32)).reshape(self.shape)
        return (sampled >= 0.5) & self.valid
