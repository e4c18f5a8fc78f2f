"""Scenes splattrain makes itself: the demo (ray-traced from exact primitives), its variants for
tests (exposure changes, jittered poses, a COLMAP project) and a COLMAP-like scene of real size."""
