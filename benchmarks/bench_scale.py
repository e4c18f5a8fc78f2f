"""Training steps of the compiled CPU backend at 1000x667 pixels with 100k to 1M Gaussians.

Synthetic scenes shaped like trained ones: small Gaussians (a few pixels across), mostly opaque,
spread over depths 2 to 12 in front of one camera, SH degree 3. Per row:

- ms per step by stage, each stage timed alone as a training step runs it (median of
  ``--repeats``): SH colours (fwd + bwd), projection (fwd + bwd), tile binning, compositing
  forward, compositing backward, loss (L1 + D-SSIM, fwd + bwd), densification statistics
  (the default strategy's gradient bookkeeping) and the optimizer (compiled Adam, all groups);
  then a whole step (all of it, as the trainer runs it) timed on its own;
- initial k-NN: seconds to find each point's 3 nearest neighbours (the initial scales of a
  scene with that many points; scipy's k-d tree), once;
- overlaps: Gaussian-tile pairs of whole bounding rectangles and of the tiles each ellipse
  reaches (what is composited);
- memory, measured in a fresh process per row that only trains (Linux): the peak resident set
  of a training step (the third; the kernel's peak mark is reset before it) above the resident
  set before the scene was made, per Gaussian; the same less what a 1000-Gaussian scene's step
  takes (the image-sized buffers of rendering and the loss, which do not grow with the
  Gaussians); next to the exact bytes per Gaussian of the parameters, gradients, Adam moments
  and strategy statistics (the remainder is renderer buffers, autograd's saved tensors and
  memory the allocator keeps).

It ends with a least-squares fit of step time against composited overlaps (ns per overlap plus
a per-Gaussian term) and the largest relative residual.

    python benchmarks/bench_scale.py [--counts 100000 300000 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rasterizer import median_ms  # noqa: E402

from splattrain.optim.adam import GaussianAdam, step_adam  # noqa: E402
from splattrain.cameras import Camera, stack_cameras  # noqa: E402
from splattrain.losses import photometric_loss  # noqa: E402
from splattrain.model.gaussians import GaussianModel  # noqa: E402
from splattrain.model.neighbours import mean_knn_distance  # noqa: E402
from splattrain.registry import RENDERERS  # noqa: E402
from splattrain.render import cpu_renderer  # noqa: E402,F401  (registers the cpu renderer)
from splattrain.kernels import build  # noqa: E402
from splattrain.render import cpu_rasterizer as cpu  # noqa: E402
from splattrain.kernels.threads import cores_for_the_library, loop_threads  # noqa: E402
from splattrain.strategy import build_strategy  # noqa: E402

WIDTH, HEIGHT = 1000, 667
SMALL_SCENE = 1000  # Gaussians of the scene whose step measures the memory that does not grow with them


def rss_mb() -> float:
    """Current resident set (MiB)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def peak_rss_mb() -> float:
    """Peak resident set since the last reset_peak() (MiB)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (Linux); False when not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def camera() -> Camera:
    focal = 0.9 * WIDTH
    K = torch.tensor([[focal, 0.0, WIDTH / 2], [0.0, focal, HEIGHT / 2], [0.0, 0.0, 1.0]])
    return Camera(viewmat=torch.eye(4), K=K, width=WIDTH, height=HEIGHT, name="scale")


def trained_like(count: int, seed: int = 0) -> GaussianModel:
    """Gaussians in the camera's frustum at depths 2..12, each a few pixels across, mostly opaque."""
    g = torch.Generator().manual_seed(seed)
    depth = 2.0 + 10.0 * torch.rand(count, generator=g)
    x = (torch.rand(count, generator=g) - 0.5) * (WIDTH / (0.9 * WIDTH)) * depth
    y = (torch.rand(count, generator=g) - 0.5) * (HEIGHT / (0.9 * WIDTH)) * depth
    means = torch.stack([x, y, depth], dim=1)
    # about 0.6 to 4 pixels of standard deviation at focal 900 px, thinner along one axis
    pixels = torch.exp(torch.empty(count, 3).uniform_(-0.5, 1.4, generator=g))
    pixels[:, 2] *= 0.3
    scales = torch.log(pixels * depth[:, None] / (0.9 * WIDTH))
    quats = torch.randn(count, 4, generator=g)
    opacity_logits = torch.randn(count, generator=g) * 1.5 + 2.0  # sigmoid: median 0.88
    sh = torch.randn(count, 16, 3, generator=g) * 0.3
    sh[:, 1:] *= 0.1
    params = {"means": means, "scales": scales, "quats": quats, "opacities": opacity_logits,
              "sh0": sh[:, :1].contiguous(), "shN": sh[:, 1:].contiguous()}
    return GaussianModel(params, sh_degree=3)


class TrainingStep:
    """What DefaultTrainer.train_step does for one view: render, loss, backward, the default
    strategy's statistics, the fused Adam of every parameter group."""

    def __init__(self, model: GaussianModel, cam: Camera, target: torch.Tensor) -> None:
        self.model, self.cam, self.target = model, cam, target
        self.renderer = RENDERERS.build({"type": "cpu"})
        self.background = torch.ones(3)
        library = build.load_library()
        self.optimizers = {name: GaussianAdam([{"params": [p], "lr": 1e-4, "name": name}], eps=1e-15, library=library)
                           for name, p in model.params.items()}
        self.strategy = build_strategy({"type": "default"}, self.renderer)
        self.state = self.strategy.initialize_state(scene_scale=1.0)
        self.info: Dict[str, object] = {}

    def __call__(self) -> None:
        params = self.model.params
        result = self.renderer.render(self.model, [self.cam], 3, self.background, depth=False)
        result.info["n_cameras"] = 1
        self.strategy.step_pre_backward(params, self.optimizers, self.state, 1, result.info)
        photometric_loss(result.rgb, self.target)["loss"].backward()
        self.info = result.info
        self.strategy.step_post_backward(params, self.optimizers, self.state, 1, result.info)
        step_adam(self.optimizers.values())
        for param in params.values():
            param.grad = None


def stage_timers(model: GaussianModel, cam: Camera, target: torch.Tensor) -> Tuple[Dict[str, Callable[[], object]], Dict]:
    """One callable per stage, plus the whole trainer-like step; and facts about the scene."""
    viewmats, Ks, width, height = stack_cameras([cam])
    params = model.params
    means, sh0, shN = params["means"], params["sh0"], params["shN"]
    quats, scales, opacities = model.quats.detach(), model.scales.detach(), model.opacities.detach()
    with torch.no_grad():
        colors = cpu.sh_colors(means, sh0, shN, viewmats, 3)
        proj = cpu.project(means, quats, scales, opacities, viewmats, Ks, width, height)
    full = cpu.intersect_tiles(proj.means2d, proj.radii, proj.depths, width, height, 16)
    isects = cpu.intersect_tiles(proj.means2d, proj.radii, proj.depths, width, height, 16, proj.conics, proj.opacities)
    inputs = [t.clone().requires_grad_() for t in (proj.means2d, proj.conics, proj.opacities, colors)]
    render, trans, _ = cpu._Composite.apply(*inputs, isects, width, height)
    grads = (torch.randn_like(render), torch.randn_like(trans))
    image = render.detach().clamp(0, 1).requires_grad_()
    step = TrainingStep(model, cam, target)
    optimizers, strategy, state = step.optimizers, step.strategy, step.state

    def sh() -> object:
        out = cpu.sh_colors(means, sh0, shN, viewmats, 3)
        return torch.autograd.grad(out, [means, sh0, shN], torch.ones_like(out))

    def projection() -> object:
        p = cpu.project(means, quats, scales, opacities, viewmats, Ks, width, height)
        outs = [p.means2d, p.conics, p.opacities, p.depths]
        return torch.autograd.grad(outs, [means], [torch.ones_like(o) for o in outs], allow_unused=True)

    def composite_backward() -> object:
        render, trans, _ = cpu._Composite.apply(*inputs, isects, width, height)
        return torch.autograd.grad((render, trans), inputs, grads)

    step()  # gradients and optimizer state exist from here on
    for param in params.values():
        param.grad = torch.zeros_like(param)

    def statistics_update() -> None:
        strategy.step_post_backward(params, optimizers, state, 1, step.info)

    timers = {
        "SH colours (fwd + bwd)": sh,
        "projection (fwd + bwd)": projection,
        "tile binning": lambda: cpu.intersect_tiles(proj.means2d, proj.radii, proj.depths, width, height, 16,
                                                    proj.conics, proj.opacities),
        "compositing fwd": lambda: cpu._Composite.apply(*inputs, isects, width, height),
        "compositing fwd + bwd": composite_backward,
        "loss (fwd + bwd)": lambda: photometric_loss(image, target)["loss"].backward(),
        "densify statistics": statistics_update,
        "optimizer (fused Adam)": lambda: step_adam(optimizers.values()),
    }
    facts = {"overlaps": int(full.flatten_ids.numel()), "snug": int(isects.flatten_ids.numel()),
             "visible": int((proj.radii > 0).all(-1).sum()), "state": state, "optimizers": optimizers}
    return {**timers, "whole step": step}, facts


def exact_bytes(model: GaussianModel, facts: Dict) -> Dict[str, float]:
    """Bytes per Gaussian of the tensors whose size is known exactly."""
    n = model.num_gaussians
    params = sum(p.numel() * p.element_size() for p in model.params.values())
    moments = sum(t.numel() * t.element_size() for opt in facts["optimizers"].values()
                  for s in opt.state.values() for k, t in s.items() if k != "step")
    stats = sum(t.numel() * t.element_size() for t in facts["state"].values() if isinstance(t, torch.Tensor))
    return {"parameters": params / n, "gradients": params / n, "Adam moments": moments / n, "strategy statistics": stats / n}


def step_memory(count: int) -> Dict[str, float]:
    """In this (fresh) process: the resident set before a ``count``-Gaussian scene is made and the
    peak of its third training step (MiB), nothing else alive but what training keeps."""
    cam = camera()
    target = torch.rand(1, HEIGHT, WIDTH, 3, generator=torch.Generator().manual_seed(1))
    build.load_library()
    gc.collect()
    base = rss_mb()
    model = trained_like(count)
    for param in model.params.values():
        param.requires_grad_(True)
    step = TrainingStep(model, cam, target)
    step()
    step()  # gradients, moments and the allocator's pools as they stay
    if not reset_peak():
        return {"base": base, "peak": float("nan")}
    step()
    return {"base": base, "peak": peak_rss_mb()}


def step_memory_in_child(count: int) -> Dict[str, float]:
    """step_memory(count) in a new Python process (no other row's memory in its figures)."""
    out = subprocess.run([sys.executable, __file__, "--memory-of", str(count)], check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-of", type=int, help=argparse.SUPPRESS)  # the child of step_memory_in_child
    args = parser.parse_args()
    if args.memory_of is not None:
        print(json.dumps(step_memory(args.memory_of)))
        return
    build.load_library(print)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"torch {torch.__version__}, {loop_threads()} threads, {WIDTH}x{HEIGHT} px, one view, "
          f"median of {args.repeats}, load average {load}")
    cam = camera()
    target = torch.rand(1, HEIGHT, WIDTH, 3, generator=torch.Generator().manual_seed(1))
    rows: List[Dict] = []
    for count in args.counts:
        model = trained_like(count)
        for param in model.params.values():
            param.requires_grad_(True)
        timers, facts = stage_timers(model, cam, target)
        times = {name: median_ms(fn, 1, args.repeats) for name, fn in timers.items()}
        knn_started = time.perf_counter()
        mean_knn_distance(model.means.detach())  # the initial scales of a scene with this many points
        knn_s = time.perf_counter() - knn_started
        rows.append({"count": count, "times": times, "knn_s": knn_s,
                     **{k: facts[k] for k in ("overlaps", "snug", "visible")},
                     "exact": exact_bytes(model, facts), **step_memory_in_child(count)})
        del timers, facts, model
    # what does not grow with the Gaussians: the image-sized buffers of rendering and the loss
    fixed = step_memory_in_child(SMALL_SCENE)
    fixed_mb = fixed["peak"] - fixed["base"]
    stages = list(rows[0]["times"])
    print(f"\n{'ms per step':>30}" + "".join(f"{r['count']:>12,}" for r in rows))
    for stage in stages:
        print(f"{stage:>30}" + "".join(f"{r['times'][stage]:12.1f}" for r in rows))
    print(f"{'initial k-NN (3 nearest) s':>30}" + "".join(f"{r['knn_s']:12.2f}" for r in rows))
    print(f"{'Gaussians in view':>30}" + "".join(f"{r['visible']:>12,}" for r in rows))
    print(f"{'overlaps (rectangles)':>30}" + "".join(f"{r['overlaps']:>12,}" for r in rows))
    print(f"{'overlaps (composited)':>30}" + "".join(f"{r['snug']:>12,}" for r in rows))
    print(f"{'composite ns/overlap':>30}" + "".join(
        f"{r['times']['compositing fwd + bwd'] * 1e6 / max(r['snug'], 1):12.0f}" for r in rows))
    print(f"{'peak RSS of a step MiB':>30}" + "".join(f"{r['peak']:12.0f}" for r in rows))
    print(f"{'(peak - start) B/Gaussian':>30}" + "".join(
        f"{(r['peak'] - r['base']) * 2**20 / r['count']:12.0f}" for r in rows))
    print(f"{'beyond the images B/Gaussian':>30}" + "".join(
        f"{(r['peak'] - r['base'] - fixed_mb) * 2**20 / r['count']:12.0f}" for r in rows))
    print(f"{'(images and fixed buffers MiB':>30}" + f"{fixed_mb:12.0f}" + f"   at {SMALL_SCENE:,} Gaussians)")
    for key in rows[0]["exact"]:
        print(f"{key + ' B/Gaussian':>30}" + "".join(f"{r['exact'][key]:12.0f}" for r in rows))
    # step = a + b * overlaps, least squares (a: the per-image work, loss and image buffers; b
    # also carries the per-Gaussian stages, as overlaps grow with the Gaussians here)
    if len(rows) >= 2:
        A = torch.tensor([[1.0, r["snug"]] for r in rows], dtype=torch.float64)
        y = torch.tensor([r["times"]["whole step"] * 1e6 for r in rows], dtype=torch.float64)  # ns
        coef = torch.linalg.lstsq(A, y[:, None]).solution[:, 0]
        worst = ((A @ coef - y).abs() / y).max().item()
        print(f"\nwhole step ~ {coef[0] / 1e6:.1f} ms + {coef[1]:.0f} ns per composited overlap "
              f"(largest relative residual {worst:.1%})")

if __name__ == "__main__":
    with cores_for_the_library():  # the threads as training has them
        main()
