"""Milliseconds per training step (render + loss + backward) per renderer backend, side by side.

A step is what the trainer runs: RGB without depth (``trainer.render_depth`` is off), the
photometric loss (L1 + D-SSIM), and the backward pass.

1. Headline: the demo scene (data/demo, 128x128) with ``--demo-gaussians`` Gaussians (random
   init, as ``splattrain fit --config configs/demo.yaml`` starts) or, with ``--demo-checkpoint``,
   the Gaussians of a trained run's checkpoint, cycling through the training views. Renderers
   take turns step by step in one process, so load from other processes hits them alike.
   Prints the median ms per step, the ratio to the torch backend, and the optimizer step on
   its own: torch.optim.Adam, the compiled Adam (``optim.fused``) and its visible-only variant
   (``optim.sparse``), taking turns, and the whole step with the compiled Adam.
2. Scaling table: a synthetic scene (Gaussians in a unit ball, seen from 4 units) over image
   sizes and Gaussian counts, with the number of Gaussian-tile overlaps (16 px tiles): of whole
   bounding rectangles (what the torch backend composites) and of the tiles each ellipse
   reaches (what the cpu backend composites), and the cost per overlap composited.

    python benchmarks/bench_train_step.py                   # headline + 64..256 px x 1k..20k
    python benchmarks/bench_train_step.py --wide            # table over 64..512 px x 1k..200k
    python benchmarks/bench_train_step.py --renderers cpu --sizes 128 --counts 20000 --no-demo
    python benchmarks/bench_train_step.py --demo-checkpoint outputs/demo/ckpt/last.pt --no-table
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from splattrain.optim.adam import GaussianAdam, step_adam, visible_gaussians
from splattrain.cameras import Camera
from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.engine import load_config
from splattrain.engine.trainer import DefaultTrainer
from splattrain.errors import ConfigError
from splattrain.losses import photometric_loss
from splattrain.model.gaussians import GaussianModel
from splattrain.registry import RENDERERS
from splattrain.render import Renderer, build_renderer
from splattrain.kernels.build import load_library

REPO = Path(__file__).resolve().parents[1]
WIDE_SIZES = [64, 128, 256, 512]
WIDE_COUNTS = [1000, 10000, 50000, 200000]


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
    return GaussianModel.from_points(points, torch.rand(count, 3, generator=g), sh_degree=3, opacity=0.5, generator=g)


def available_renderers() -> List[str]:
    """torch, and cpu when its library builds (gsplat needs CUDA; this benchmark runs on the CPU)."""
    try:
        build_renderer({"type": "cpu"}, torch.device("cpu"), log=print)
    except ConfigError as error:
        print(f"cpu renderer unavailable: {error}")
        return ["torch"]
    return ["torch", "cpu"]


def step_timer(renderer: Renderer, model: GaussianModel, sh_degree: int) -> Callable[[List[Camera], torch.Tensor], float]:
    """A function timing one render + loss + backward (seconds), gradients cleared after."""
    background = torch.ones(3)

    def step(cameras: List[Camera], target: torch.Tensor) -> float:
        with renderer.training_threads():  # the threads as training has them
            start = time.perf_counter()
            result = renderer.render(model, cameras, sh_degree, background, depth=False)  # as the trainer does
            photometric_loss(result.rgb, target)["loss"].backward()
            elapsed = time.perf_counter() - start
        for param in model.params.values():
            param.grad = None
        return elapsed

    return step


def overlaps(model: GaussianModel, camera: Camera, sh_degree: int, renderer: str = "torch") -> int:
    """Gaussian-tile intersections (16 px tiles) of one view: whole bounding rectangles with the
    torch renderer, the tiles each ellipse reaches with the cpu renderer."""
    with torch.no_grad():
        info = RENDERERS.build({"type": renderer}).render(model, [camera], sh_degree, torch.ones(3)).info
    return int(info["flatten_ids"].numel())


def optimizer_times(model: GaussianModel, camera: Camera, repeats: int) -> Dict[str, List[float]]:
    """Seconds per optimizer step over all six groups: torch.optim.Adam, the compiled Adam and
    its visible-only variant (Gaussians seen from ``camera``), taking turns on copies of the
    parameters."""
    with torch.no_grad():
        info = RENDERERS.build({"type": "cpu"}).render(model, [camera], 3, torch.ones(3)).info
    visible = visible_gaussians([info])
    library = load_library()
    variants: Dict[str, Callable[[], None]] = {}
    for name in ("torch.optim.Adam", "fused", "fused sparse"):
        params = [p.detach().clone().requires_grad_() for p in model.params.values()]
        for param in params:
            param.grad = torch.randn_like(param) * 1e-3
        if name == "torch.optim.Adam":
            optimizers = [torch.optim.Adam([p], lr=1e-4, eps=1e-15) for p in params]
            variants[name] = lambda optimizers=optimizers: [o.step() for o in optimizers]
        else:
            sparse = name == "fused sparse"
            optimizers = [GaussianAdam([{"params": [p], "lr": 1e-4}], eps=1e-15, library=library, sparse=sparse)
                          for p in params]
            variants[name] = lambda optimizers=optimizers, sparse=sparse: step_adam(optimizers, visible if sparse else None)
    times: Dict[str, List[float]] = {name: [] for name in variants}
    for i in range(repeats + 1):
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            if i > 0:
                times[name].append(time.perf_counter() - start)
    times["visible share"] = [float(visible.float().mean())]
    return times


def headline(names: List[str], count: int, checkpoint: Optional[Path], repeats: int) -> None:
    """Side-by-side steps on the demo scene."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = load_config(REPO / "configs" / "demo.yaml", [
            f"model.init.num_points={count}", "metrics.lpips=false", f"output_dir={tmp}",
        ])
        trainer = DefaultTrainer(cfg)
    model = trainer.model
    if checkpoint is not None:
        model.load_state_dict(load_checkpoint_file(checkpoint)["gaussians"])
    sh_degree = cfg.model.sh_degree
    batches = [trainer.data.next_train(step) for step in range(1, repeats + 2)]
    timers = {name: step_timer(RENDERERS.build({"type": name}), model, sh_degree) for name in names}
    times: Dict[str, List[float]] = {name: [] for name in names}
    for i, batch in enumerate(batches):
        for name in names:
            elapsed = timers[name](batch["camera"], batch["image"])
            if i > 0:  # the first step warms caches up
                times[name].append(elapsed)
    camera = batches[0]["camera"][0]
    adam = optimizer_times(model, camera, repeats)
    origin = f"from {checkpoint}" if checkpoint is not None else "random init"
    snug = f", {overlaps(model, camera, sh_degree, 'cpu')} composited by cpu" if "cpu" in names else ""
    print(f"demo scene {camera.width}x{camera.height}, {model.num_gaussians} Gaussians ({origin}), "
          f"SH degree {sh_degree}, {overlaps(model, camera, sh_degree)} overlaps in view 1{snug}, "
          f"{repeats} steps per renderer, taking turns")
    base = statistics.median(times["torch"]) if "torch" in times else None
    print(f"{'renderer':>9} {'ms/step':>9} {'min ms':>8} {'speed-up':>9}   (render + loss + backward)")
    for name in names:
        median, fastest = statistics.median(times[name]) * 1000, min(times[name]) * 1000
        ratio = f"{base * 1000 / median:8.1f}x" if base else ""
        print(f"{name:>9} {median:9.1f} {fastest:8.1f} {ratio:>9}")
    reference = statistics.median(adam["torch.optim.Adam"])
    print(f"optimizer step, all six groups ({adam.pop('visible share')[0]:.0%} of the Gaussians visible in view 1):")
    for name, values in adam.items():
        print(f"{name:>22} {statistics.median(values) * 1000:7.2f} ms  {reference / statistics.median(values):5.1f}x")
    if "cpu" in names:
        whole = {name: (statistics.median(times["cpu"]) + statistics.median(adam[name])) * 1000
                 for name in ("torch.optim.Adam", "fused")}
        print(f"cpu step with the optimizer: {whole['fused']:.1f} ms (fused Adam), "
              f"{whole['torch.optim.Adam']:.1f} ms (torch.optim.Adam)")
    if base is not None:
        torch_whole = (base + reference) * 1000
        print(f"torch step with torch.optim.Adam: {torch_whole:.1f} ms")


def table(names: List[str], sizes: List[int], counts: List[int], repeats: int) -> None:
    """Scaling over image sizes and Gaussian counts on the synthetic scene."""
    print(f"\nsynthetic scene, median of {repeats} steps (render + loss + backward)")
    print(f"{'renderer':>9} {'size':>5} {'gaussians':>10} {'overlaps':>9} {'snug':>9} {'ms/step':>9} {'ns/overlap':>11}")
    for size in sizes:
        camera = look_at_camera(size)
        target = torch.rand(1, size, size, 3, generator=torch.Generator().manual_seed(1))
        for count in counts:
            model = random_model(count)
            n_overlaps = overlaps(model, camera, 3)
            n_snug = overlaps(model, camera, 3, "cpu") if "cpu" in names else n_overlaps
            timers = {name: step_timer(RENDERERS.build({"type": name}), model, 3) for name in names}
            times: Dict[str, List[float]] = {name: [] for name in names}
            for i in range(repeats + 1):
                for name in names:
                    elapsed = timers[name]([camera], target)
                    if i > 0:
                        times[name].append(elapsed)
            for name in names:
                ms = statistics.median(times[name]) * 1000
                done = n_snug if name == "cpu" else n_overlaps  # what this renderer composites
                print(f"{name:>9} {size:>5} {count:>10} {n_overlaps:>9} {n_snug:>9} {ms:9.1f} "
                      f"{ms * 1e6 / max(done, 1):11.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--renderers", nargs="+", help="default: every backend available on this machine")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--demo-gaussians", type=int, default=20000)
    parser.add_argument("--demo-checkpoint", type=Path, help="take the demo Gaussians from this run checkpoint")
    parser.add_argument("--no-demo", action="store_true", help="skip the demo-scene headline")
    parser.add_argument("--no-table", action="store_true", help="skip the scaling table")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--counts", type=int, nargs="+", default=[1000, 10000, 20000])
    parser.add_argument("--wide", action="store_true", help=f"table over {WIDE_SIZES} px x {WIDE_COUNTS} Gaussians")
    args = parser.parse_args()
    names = args.renderers or available_renderers()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, renderers {', '.join(names)}")
    if not args.no_demo:
        headline(names, args.demo_gaussians, args.demo_checkpoint, args.repeats)
    if args.wide:
        args.sizes, args.counts = WIDE_SIZES, WIDE_COUNTS
    if not args.no_table:
        table(names, args.sizes, args.counts, args.repeats)


if __name__ == "__main__":
    main()
