"""The command-line options of ``splattrain process`` and the option objects they make.

Only the standard library is imported here: the parser is built on every ``splattrain`` call.
"""

from __future__ import annotations

import argparse

MATCHERS = ("auto", "exhaustive", "sequential")
MAPPERS = ("incremental", "global")
CAMERA_MODES = {"single": "SINGLE", "per-folder": "PER_FOLDER", "per-image": "PER_IMAGE"}
#: Camera models the mapper may fit; splattrain's reader and the undistortion stage handle each.
CAMERA_MODELS = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV")
#: Video frames kept by default, and the default limit on their long side in pixels.
DEFAULT_FRAMES = 150
DEFAULT_MAX_SIZE = 1600
#: The default limit on a photo's pixels, in millions (a 100-megapixel camera's photos pass).
DEFAULT_MAX_MEGAPIXELS = 100.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The positional INPUT / OUTPUT and every option (argparse has no import cost to speak of)."""
    parser.add_argument("input", metavar="INPUT", help="a folder of photos (.jpg/.png) or a video file")
    parser.add_argument("output", metavar="OUTPUT", help="the scene folder to write (images/, sparse/0/, images_2/4/8/)")
    parser.add_argument("--matcher", choices=MATCHERS, default="auto",
                        help="image pairs to match (auto: sequential for a video, exhaustive for photos)")
    parser.add_argument("--mapper", choices=MAPPERS, default="incremental", help="incremental or global (GLOMAP) mapping")
    parser.add_argument("--camera", choices=["auto", *CAMERA_MODES], default="auto",
                        help="one camera for all images, one per sub-folder, or one per image "
                             "(auto: one per photo, one for a video's frames)")
    parser.add_argument("--camera-model", choices=["auto", *CAMERA_MODELS], default="auto",
                        help="lens model to fit (auto: SIMPLE_PINHOLE per image, SIMPLE_RADIAL for a shared camera)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                        help="where SIFT runs (auto: the GPU when this pycolmap has CUDA)")
    parser.add_argument("--frames", type=int, default=DEFAULT_FRAMES, metavar="N",
                        help="video: keep N frames, the sharpest of each of N equal stretches")
    parser.add_argument("--fps", type=float, default=None, help="video: keep this many frames per second instead")
    parser.add_argument("--max-size", type=int, default=DEFAULT_MAX_SIZE, metavar="PX",
                        help="video: shrink frames to at most PX pixels on their long side")
    parser.add_argument("--max-megapixels", type=float, default=DEFAULT_MAX_MEGAPIXELS, metavar="MP",
                        help="skip photos larger than this many million pixels (checked before they are decoded)")
