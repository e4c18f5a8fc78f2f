"""An example renderer: any backend at a lower internal resolution, upsampled to the full size.

Load it from a config with ``imports: [examples/my_renderer.py]`` and set
``renderer: {type: lowres, backend: torch, factor: 2}``; docs/extending.md walks through it.
"""

from __future__ import annotations

from typing import Optional

import torch.nn.functional as F
from torch import Tensor

from splattrain import RENDERERS, ConfigError, Renderer, RenderResult
from splattrain.render import build_renderer


@RENDERERS.register("lowres")
class LowResRenderer(Renderer):
    """Any other renderer at 1/``factor`` of the image size, upsampled bilinearly.

    Renders with ``backend`` at 1/``factor`` of each camera's size (cheaper steps early in
    training, or a low-pass view of the scene) and upsamples colour, opacity and depth.

    ``info`` is the inner render's (screen positions and radii in the low-resolution image,
    with its ``width`` and ``height``), so densification sees consistent gradients.
    """

    def __init__(self, backend: str = "auto", factor: int = 2, rasterize_mode: str = "classic") -> None:
        super().__init__(rasterize_mode=rasterize_mode)
        if factor < 1:
            raise ConfigError(f"renderer.factor must be an integer >= 1, got {factor}")
        if backend != "auto" and RENDERERS.get(backend) is type(self):
            raise ConfigError("renderer.backend must name another renderer than lowres")
        self.backend = backend
        self.factor = factor
        self.inner: Optional[Renderer] = None

    def render(self, model, cameras, sh_degree: int, background: Tensor, depth: bool | str = True) -> RenderResult:
        if self.inner is None:  # built on first use, on the model's device
            spec = {"type": self.backend, "rasterize_mode": self.rasterize_mode}
            self.inner = build_renderer(spec, model.means.device, absgrad=self.absgrad)
        small = [camera.scaled(1.0 / self.factor) for camera in cameras]
        result = self.inner.render(model, small, sh_degree, background, depth=depth)
        size = (cameras[0].height, cameras[0].width)

        def upsample(image: Optional[Tensor]) -> Optional[Tensor]:
            if image is None:
                return None
            return F.interpolate(image.permute(0, 3, 1, 2), size=size, mode="bilinear").permute(0, 2, 3, 1)

        return RenderResult(upsample(result.rgb), upsample(result.alpha), upsample(result.depth), result.info,
                            median_depth=upsample(result.median_depth))
