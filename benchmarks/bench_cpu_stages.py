"""Milliseconds per stage of the compiled CPU backend on a scene, per instruction set.

The demo scene (data/demo, 128x128) with ``--gaussians`` random-init Gaussians, as
``splattrain fit --config configs/demo.yaml`` starts, or with the Gaussians of a checkpoint
(``--checkpoint``, e.g. a finished demo run's ``ckpt/last.pt``), seen from the first training
view. ``--config`` and ``--data`` time another preset's scene (its checkpoint's Gaussians).
Each stage is timed alone (median of ``--repeats`` after one warm-up), as a training step runs
it (RGB, no depth channel): SH colours, projection, tile binning, compositing forward,
compositing forward + backward, the loss, and a whole step (render + loss + backward); then the
view's compositing work (tile intersections, pixel-Gaussian pairs within reach and those in front of
each pixel's last contributor) and the compositing time per pair, to set against what the vector
units can do. The
projection, SH and compositing kernels are built for several instruction sets; ``--isa`` picks
which ones to time (default: every one this CPU runs).

``--lego`` times the NeRF-synthetic lego scene as ``configs/blender.yaml`` trains it (the first of
its 800x800 training views, ``../shared/scenes/lego`` or ``--data``) with 100k, 200k and 300k
random-init Gaussians (``--gaussians`` names other counts); one table per count. Extra
``dotted.key=value`` arguments go to the preset (``data.downscale=8``: a smaller view).

``--cpu-time`` times the calling thread's CPU seconds instead of wall time and reports the
least of the repeats: with one thread (``OMP_NUM_THREADS=1``) that figure hardly moves when other
programs share the machine, so two versions can be compared on a busy machine.

    python benchmarks/bench_cpu_stages.py
    python benchmarks/bench_cpu_stages.py --isa baseline avx512 --repeats 50
    python benchmarks/bench_cpu_stages.py --config configs/colmap.yaml --data ../shared/scenes/cup \
        --checkpoint <a cup run>/ckpt/last.pt
    OMP_NUM_THREADS=1 python benchmarks/bench_cpu_stages.py --checkpoint outputs/demo/ckpt/last.pt --cpu-time
    python benchmarks/bench_cpu_stages.py --lego --isa avx2 --repeats 10
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from omegaconf import OmegaConf

from bench_rasterizer import median_ms
from splattrain.cameras import stack_cameras
from splattrain.commands.snapshot import load_snapshot
from splattrain.console import Console
from splattrain.data.pipeline import focus_point
from splattrain.engine import load_config
from splattrain.engine.trainer import DefaultTrainer
from splattrain.losses import photometric_loss
from splattrain.model.gaussians import GaussianModel
from splattrain.model.init import random_gaussians
from splattrain.registry import RENDERERS
from splattrain.kernels import build
from splattrain.render import cpu_rasterizer as cpu
from splattrain.kernels.threads import cores_for_the_library, loop_threads

REPO = Path(__file__).resolve().parents[1]
LEGO = REPO.parent / "shared" / "scenes" / "lego"
LEGO_GAUSSIANS = [100_000, 200_000, 300_000]


def first_view(config: Path, data: Optional[Path], overrides: Sequence[str] = ()) -> Tuple[Any, Dict[str, Any]]:
    """A trainer built for ``config``'s scene (``data``: another data.path; not run) and its first
    training batch."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = ["metrics.lpips=false", f"output_dir={tmp}", "writers=[]", *overrides]
        if data is not None:
            settings.insert(0, f"data.path={data.resolve()}")
        trainer = DefaultTrainer(load_config(config, settings), console=Console(quiet=True))
    batch = trainer.data.next_train(1)
    trainer.data.close()
    return trainer, batch


def random_model(trainer: Any, gaussians: int) -> GaussianModel:
    """``gaussians`` Gaussians as the trainer's ``model.init`` places them (random init)."""
    init = OmegaConf.merge(trainer.cfg.model.init, {"num_points": gaussians})
    model = random_gaussians(init, int(trainer.cfg.model.sh_degree), focus_point(trainer.data.train_cameras),
                             int(trainer.cfg.seed))
    for param in model.params.values():
        param.requires_grad_(True)
    return model


def stage_timers(gaussians: int, checkpoint: Optional[Path] = None, config: Path = REPO / "configs" / "demo.yaml",
                 data: Optional[Path] = None, overrides: Sequence[str] = (),
                 view: Optional[Tuple[Any, Dict[str, Any]]] = None
                 ) -> Tuple[Dict[str, Callable[[], object]], Tuple[int, int, int]]:
    """One callable per stage, on the first training view of ``config``'s scene (``data``:
    another data.path; ``view``: a :func:`first_view` already read), with random-init Gaussians or
    the checkpoint's; and the view's compositing work (:func:`pair_counts`)."""
    trainer, batch = view or first_view(config, data, [f"model.init.num_points={gaussians}", *overrides])
    model = trainer.model
    if checkpoint is not None:
        model = load_snapshot(checkpoint, "cpu").model
        for param in model.params.values():
            param.requires_grad_(True)
    elif view is not None and model.num_gaussians != gaussians:
        model = random_model(trainer, gaussians)
    viewmats, Ks, width, height = stack_cameras(batch["camera"])
    params = {name: value.detach().requires_grad_() for name, value in model.params.items()}
    means, sh0, shN = params["means"], params["sh0"], params["shN"]
    quats, scales, opacities = model.quats.detach(), model.scales.detach(), model.opacities.detach()
    with torch.no_grad():
        colors = cpu.sh_colors(means, sh0, shN, viewmats, 3)
        proj = cpu.project(means, quats, scales, opacities, viewmats, Ks, width, height)
    isects = cpu.intersect_tiles(proj.means2d, proj.radii, proj.depths, width, height, 16, proj.conics, proj.opacities)
    features = colors.clone().requires_grad_()  # RGB: training steps render no depth
    inputs = [t.clone().requires_grad_() for t in (proj.means2d, proj.conics, proj.opacities)]
    render, trans, _ = cpu._Composite.apply(*inputs, features, isects, width, height)
    work = pair_counts(proj, isects, render.grad_fn.saved_tensors[-1][0], width, height)
    grads = (torch.randn_like(render), torch.randn_like(trans))
    image = render[..., :3].detach().clamp(0, 1).requires_grad_()
    renderer = RENDERERS.build({"type": "cpu"})
    background = torch.ones(3)

    def sh() -> object:
        out = cpu.sh_colors(means, sh0, shN, viewmats, 3)
        return torch.autograd.grad(out, [means, sh0, shN], torch.ones_like(out))

    def projection() -> object:
        p = cpu.project(means, quats, scales, opacities, viewmats, Ks, width, height)
        outs = [p.means2d, p.conics, p.opacities, p.depths]
        return torch.autograd.grad(outs, [means], [torch.ones_like(o) for o in outs], allow_unused=True)

    def composite() -> object:
        render, trans, _ = cpu._Composite.apply(*inputs, features, isects, width, height)
        return torch.autograd.grad((render, trans), [*inputs, features], grads)

    def step() -> None:
        result = renderer.render(model, batch["camera"], 3, background, depth=False)  # as in training
        photometric_loss(result.rgb, batch["image"])["loss"].backward()
        for param in model.params.values():
            param.grad = None

    return {
        "SH colours (fwd + bwd)": sh,
        "projection (fwd + bwd)": projection,
        "tile binning": lambda: cpu.intersect_tiles(proj.means2d, proj.radii, proj.depths, width, height, 16,
                                                    proj.conics, proj.opacities),
        "compositing fwd": lambda: cpu._Composite.apply(*inputs, features, isects, width, height),
        "compositing fwd + bwd": composite,
        "loss (fwd + bwd)": lambda: photometric_loss(image, batch["image"])["loss"].backward(),
        "whole step": step,
    }, work


def pair_counts(proj: Any, isects: Any, last: torch.Tensor, width: int, height: int,
                chunk: int = 16384) -> Tuple[int, int, int]:
    """The compositing work of one view: tile-Gaussian intersections, pixel-Gaussian pairs within
    the Gaussian's reach (alpha at least 1/255, where the kernels evaluate it), and those of them at
    or in front of each pixel's last contributor (``last``: [H, W], what the forward pass keeps)."""
    size = isects.tile_size
    offsets = torch.arange(size * size)
    lane_x, lane_y = offsets % size, offsets // size
    means, conics, opacities = proj.means2d[0].float(), proj.conics[0].float(), proj.opacities[0].float()
    total = isects.flatten_ids.numel()
    reached = in_front = 0
    for start in range(0, total, chunk):
        k = torch.arange(start, min(start + chunk, total))
        tile = (isects.isect_ids[k] >> 32) & 0xFFFFFFFF
        g = isects.flatten_ids[k].long()
        px = (tile % isects.tile_width * size)[:, None] + lane_x
        py = (tile // isects.tile_width * size)[:, None] + lane_y
        inside = (px < width) & (py < height)
        dx, dy = px + 0.5 - means[g, :1], py + 0.5 - means[g, 1:]
        a, b, c = conics[g, 0:1], conics[g, 1:2], conics[g, 2:3]
        sigma = 0.5 * (a * dx * dx + c * dy * dy) + b * dx * dy
        reach = inside & (sigma >= 0) & (opacities[g, None] * torch.exp(-sigma) >= 1.0 / 255.0)
        stop = last[py.clamp(max=height - 1), px.clamp(max=width - 1)]
        reached += int(reach.sum())
        in_front += int((reach & (k[:, None] <= stop)).sum())
    return total, reached, in_front


def least_cpu_ms(fn: Callable[[], object], warmup: int, repeats: int) -> float:
    """The least CPU time of the calling thread over ``repeats`` calls of ``fn``, in milliseconds."""
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return 1e3 * best


def parse_args(argv: Optional[Sequence[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gaussians", type=int, nargs="+", help="random-init Gaussians, one table per count "
                        "(default 20000; --lego: 100000 200000 300000)")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--isa", nargs="*", help="instruction sets to time (default: all this CPU runs)")
    parser.add_argument("--checkpoint", type=Path, help="time the Gaussians of this checkpoint instead")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "demo.yaml", help="the scene's preset")
    parser.add_argument("--data", type=Path, help="the preset's data.path, when it has none")
    parser.add_argument("--lego", action="store_true",
                        help="configs/blender.yaml on the lego scene (../shared/scenes/lego, or --data)")
    parser.add_argument("--cpu-time", action="store_true", help="least thread CPU time of the repeats instead")
    args, overrides = parser.parse_known_args(argv)
    if args.isa:  # `--isa avx2 data.downscale=8`: the settings after the sets are the preset's
        overrides += [name for name in args.isa if "=" in name]
        args.isa = [name for name in args.isa if "=" not in name]
    bad = [a for a in overrides if "=" not in a or a.startswith("-")]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)} (the preset's options are dotted.key=value)")
    if args.lego:
        args.config, args.data = REPO / "configs" / "blender.yaml", args.data or LEGO
    args.gaussians = args.gaussians or (LEGO_GAUSSIANS if args.lego else [20000])
    if args.checkpoint is not None and len(args.gaussians) > 1:
        parser.error("--checkpoint times the checkpoint's Gaussians: give one --gaussians count at most")
    return args, overrides


def main(argv: Optional[Sequence[str]] = None) -> None:
    args, overrides = parse_args(argv)
    library = build.load_library(print)
    sets: List[str] = args.isa or list(library.instruction_sets)
    view = first_view(args.config, args.data, [f"model.init.num_points={args.gaussians[0]}", *overrides])
    measure = least_cpu_ms if args.cpu_time else median_ms
    camera = view[1]["camera"][0]
    for gaussians in args.gaussians:
        timers, (intersections, reached, in_front) = stage_timers(gaussians, args.checkpoint, args.config,
                                                                  args.data, overrides, view)
        scene = f"{args.checkpoint}" if args.checkpoint else f"{gaussians} Gaussians (random init)"
        print(f"torch {torch.__version__}, {loop_threads()} threads, {args.config.name} scene, "
              f"{camera.width}x{camera.height}, {scene}, "
              f"{'least thread CPU time' if args.cpu_time else 'median wall time'} of {args.repeats}")
        print(f"{'stage':>24}" + "".join(f"{name:>10}" for name in sets) + "   (ms)")
        rows: Dict[str, List[float]] = {stage: [] for stage in timers}
        try:
            for name in sets:
                library.use_instruction_set(name)
                for stage, fn in timers.items():
                    rows[stage].append(measure(fn, 1, args.repeats))
        finally:
            library.use_instruction_set(None)
        for stage, values in rows.items():
            print(f"{stage:>24}" + "".join(f"{value:10.2f}" for value in values))
        print(f"work: {intersections:,} tile intersections, {reached:,} pixel-Gaussian pairs within reach "
              f"(alpha >= 1/255), {in_front:,} of them at or before each pixel's last contributor")
        for stage in ("compositing fwd", "compositing fwd + bwd"):
            per_pair = "".join(f"{1e6 * ms / max(in_front, 1):10.2f}" for ms in rows[stage])
            print(f"{stage + ' ns a pair':>24}{per_pair}   (of the pairs before the last contributor)")


if __name__ == "__main__":
    with cores_for_the_library():  # the threads as training has them
        main()
