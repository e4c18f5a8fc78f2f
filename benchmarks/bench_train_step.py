"""Milliseconds per training step (render + loss + backward + Adam) per renderer backend.

Runs on a synthetic scene (Gaussians scattered in a unit ball, seen from 4 units away)
for several image sizes and Gaussian counts, and prints a table.

    python benchmarks/bench_train_step.py [--sizes 64 128 256] [--counts 1000 10000 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from splattrain.cameras import Camera
from splattrain.losses import photometric_loss
from splattrain.model.gaussians import GaussianModel
from splattrain.registry import RENDERERS
from splattrain.render.splat_renderers import build_renderer  # noqa: F401  (registers renderers)


def look_at_camera(size: int, distance: float = 4.0) -> Camera:
    """A camera on the -z axis looking at the origin, ~40 degree field of view."""
    viewmat = torch.eye(4)
    viewmat[2, 3] = distance
    focal = 0.5 * size / torch.tan(torch.tensor(0.35)).item()
    K = torch.tensor([[focal, 0.0, size / 2], [0.0, focal, size / 2], [0.0, 0.0, 1.0]])
    return Camera(viewmat=viewmat, K=K, width=size, height=size, name="bench")


def random_model(count: int, seed: int = 0) -> GaussianModel:
    g = torch.Generator().manual_seed(seed)
    direction = torch.randn(count, 3, generator=g)
    points = direction / direction.norm(dim=1, keepdim=True) * torch.rand(count, 1, generator=g) ** (1 / 3)
    model = GaussianModel.from_points(points, torch.rand(count, 3, generator=g), sh_degree=3, opacity=0.5, generator=g)
    return model


def time_steps(renderer_name: str, size: int, count: int, repeats: int) -> float:
    renderer = RENDERERS.build({"type": renderer_name})
    model = random_model(count)
    camera = look_at_camera(size)
    target = torch.rand(1, size, size, 3, generator=torch.Generator().manual_seed(1))
    optimizer = torch.optim.Adam(model.params.values(), lr=1e-3)
    background = torch.ones(3)
    times = []
    for i in range(repeats + 1):
        start = time.perf_counter()
        result = renderer.render(model, [camera], 3, background)
        loss = photometric_loss(result.rgb, target)["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i > 0:  # the first step warms caches up
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 10000, 20000])
    parser.add_argument("--renderers", nargs="+", default=["torch"])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'renderer':>9} {'size':>5} {'gaussians':>10} {'ms/step':>9}")
    for name in args.renderers:
        for size in args.sizes:
            for count in args.counts:
                ms = time_steps(name, size, count, args.repeats)
                print(f"{name:>9} {size:>5} {count:>10} {ms:9.1f}")


if __name__ == "__main__":
    main()
