"""Milliseconds per stage of the compiled CPU backend on a scene, per instruction set.

The demo scene (data/demo, 128x128) with ``--gaussians`` random-init Gaussians, as
``splattrain fit --config configs/demo.yaml`` starts, or with the Gaussians of a checkpoint
(``--checkpoint``, e.g. a finished demo run's ``ckpt/last.pt``), seen from the first training
view. ``--config`` and ``--data`` time another preset's scene (its checkpoint's Gaussians).
Each stage is timed alone (median of ``--repeats`` after one warm-up), as a training step runs
it (RGB, no depth channel): SH colours, projection, tile binning, compositing forward,
compositing forward + backward, the loss, and a whole step (render + loss + backward). The
projection, SH and compositing kernels are built for several instruction sets; ``--isa`` picks
which ones to time (default: every one this CPU runs).

``--cpu-time`` times the calling thread's CPU seconds instead of wall time and reports the
least of the repeats: with one thread (``OMP_NUM_THREADS=1``) that figure hardly moves when other
programs share the machine, so two versions can be compared on a busy machine.

    python benchmarks/bench_cpu_stages.py
    python benchmarks/bench_cpu_stages.py --isa baseline avx512 --repeats 50
    python benchmarks/bench_cpu_stages.py --config configs/colmap.yaml --data ../shared/scenes/cup \
        --checkpoint <a cup run>/ckpt/last.pt
    OMP_NUM_THREADS=1 python benchmarks/bench_cpu_stages.py --checkpoint outputs/demo/ckpt/last.pt --cpu-time
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

from bench_rasterizer import median_ms
from splattrain.cameras import stack_cameras
from splattrain.commands.snapshot import load_snapshot
from splattrain.engine import load_config
from splattrain.engine.trainer import DefaultTrainer
from splattrain.losses import photometric_loss
from splattrain.registry import RENDERERS
from splattrain.kernels import build
from splattrain.render import cpu_rasterizer as cpu
from splattrain.kernels.threads import cores_for_the_library, loop_threads

REPO = Path(__file__).resolve().parents[1]


def stage_timers(gaussians: int, checkpoint: Optional[Path] = None, config: Path = REPO / "configs" / "demo.yaml",
                 data: Optional[Path] = None) -> Dict[str, Callable[[], object]]:
    """One callable per stage, on the first training view of ``config``'s scene (``data``:
    another data.path), with random-init Gaussians or the checkpoint's."""
    with tempfile.TemporaryDirectory() as tmp:
        overrides = [f"model.init.num_points={gaussians}", "metrics.lpips=false", f"output_dir={tmp}"]
        if data is not None:
            overrides.append(f"data.path={data.resolve()}")
        trainer = DefaultTrainer(load_config(config, overrides))
    model, batch = trainer.model, trainer.data.next_train(1)
    trainer.data.close()
    if checkpoint is not None:
        model = load_snapshot(checkpoint, "cpu").model
        for param in model.params.values():
            param.requires_grad_(True)
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
    }


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gaussians", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--isa", nargs="*", help="instruction sets to time (default: all this CPU runs)")
    parser.add_argument("--checkpoint", type=Path, help="time the Gaussians of this checkpoint instead")
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "demo.yaml", help="the scene's preset")
    parser.add_argument("--data", type=Path, help="the preset's data.path, when it has none")
    parser.add_argument("--cpu-time", action="store_true", help="least thread CPU time of the repeats instead")
    args = parser.parse_args()
    library = build.load_library(print)
    sets: List[str] = args.isa or list(library.instruction_sets)
    timers = stage_timers(args.gaussians, args.checkpoint, args.config, args.data)
    measure = least_cpu_ms if args.cpu_time else median_ms
    scene = f"{args.checkpoint}" if args.checkpoint else f"{args.gaussians} Gaussians (random init)"
    print(f"torch {torch.__version__}, {loop_threads()} threads, {args.config.name} scene, {scene}, "
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


if __name__ == "__main__":
    with cores_for_the_library():  # the threads as training has them
        main()
