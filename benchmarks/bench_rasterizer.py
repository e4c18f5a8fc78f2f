"""Time the pure-PyTorch rasterizer: forward and forward+backward per image size and Gaussian count.

    python benchmarks/bench_rasterizer.py
    python benchmarks/bench_rasterizer.py --sizes 128 --counts 10000 20000 --repeats 10

The scene is a few clusters of small Gaussians (scales 0.01-0.05) around the origin, seen from
4 units away with a 50 degree field of view. Times are medians over ``--repeats`` runs after
``--warmup`` runs; the loss is a weighted sum of the colour and alpha images.
"""

from __future__ import annotations

import argparse
import math
import resource
import statistics
import time
from typing import Callable, List, Tuple

import torch
from torch import Tensor

from splattrain.render.torch_rasterizer import rasterize

Scene = Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]


def look_at(eye: Tensor) -> Tensor:
    """World-to-camera matrix (OpenCV axes) of a camera at ``eye`` looking at the origin."""
    forward = -eye / eye.norm()
    right = torch.linalg.cross(forward, torch.tensor([0.0, -1.0, 0.0]))
    right = right / right.norm()
    rot = torch.stack([right, torch.linalg.cross(forward, right), forward])
    viewmat = torch.eye(4)
    viewmat[:3, :3] = rot
    viewmat[:3, 3] = -rot @ eye
    return viewmat


def make_scene(n: int, size: int, seed: int) -> Scene:
    """Gaussians in five clusters around the origin and one camera 4 units away."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(5, 3, generator=gen) * 0.5
    means = centres[torch.randint(0, 5, (n,), generator=gen)] + torch.randn(n, 3, generator=gen) * 0.3
    log_scales = torch.rand(n, 3, generator=gen) * math.log(5.0) + math.log(0.01)
    focal = 0.5 * size / math.tan(math.radians(25.0))
    K = torch.tensor([[focal, 0.0, size / 2.0], [0.0, focal, size / 2.0], [0.0, 0.0, 1.0]])
    return (
        means,
        torch.randn(n, 4, generator=gen),
        log_scales.exp(),
        torch.rand(n, generator=gen) * 0.8 + 0.1,
        torch.rand(n, 3, generator=gen),
        look_at(torch.tensor([1.0, -1.0, -3.7]))[None],
        K[None],
    )


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median_ms(fn: Callable[[], None], warmup: int, repeats: int) -> float:
    """Median wall time of ``fn`` in milliseconds."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def bench(n: int, size: int, args: argparse.Namespace) -> Tuple[float, float, int]:
    """(forward ms, forward+backward ms, tile intersections) for one configuration."""
    means, quats, scales, opacities, colors, viewmats, Ks = make_scene(n, size, args.seed)
    params = [t.requires_grad_() for t in (means, quats, scales, opacities, colors)]
    weights = torch.rand(1, size, size, 3)
    kwargs = dict(tile_size=args.tile_size, rasterize_mode=args.mode)

    def forward() -> None:
        with torch.no_grad():
            rasterize(*params, viewmats, Ks, size, size, **kwargs)

    def forward_backward() -> None:
        render, alphas, _ = rasterize(*params, viewmats, Ks, size, size, **kwargs)
        ((render * weights).sum() + alphas.sum()).backward()
        for param in params:
            param.grad = None

    with torch.no_grad():
        n_isects = rasterize(*params, viewmats, Ks, size, size, **kwargs)[2]["flatten_ids"].numel()
    return (
        median_ms(forward, args.warmup, args.repeats),
        median_ms(forward_backward, args.warmup, args.repeats),
        n_isects,
    )


def main(argv: List[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256], help="square image sizes")
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 10000, 50000], help="Gaussians")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per configuration")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per configuration")
    parser.add_argument("--tile-size", type=int, default=16)
    parser.add_argument("--mode", choices=["classic", "antialiased"], default="classic")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, tile_size {args.tile_size}, "
        f"{args.mode}, median of {args.repeats} runs; peak RSS before: {peak_rss_mb():.0f} MB"
    )
    header = (
        f"{'image':>9} {'gaussians':>9} {'isects':>8} {'fwd ms':>8} {'fwd+bwd ms':>10} {'peak RSS MB':>11}"
    )
    print(header)
    print("-" * len(header))
    for size in args.sizes:
        for n in args.counts:
            fwd, fwd_bwd, n_isects = bench(n, size, args)
            print(
                f"{size:>4}x{size:<4} {n:>9} {n_isects:>8} {fwd:>8.1f} {fwd_bwd:>10.1f} "
                f"{peak_rss_mb():>11.0f}"
            )


if __name__ == "__main__":
    main()
