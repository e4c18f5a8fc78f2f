"""One-command acceptance check of the GPU path (gsplat) against the PyTorch reference renderer.

    python benchmarks/gpu_check.py [--steps N] [dotted.key=value ...]

Prints the device, torch and gsplat versions and whether gsplat's CUDA kernels load (prebuilt
in the wheel or compiled on first use); then, on a CUDA device, trains the demo scene
(configs/demo.yaml, output in outputs/gpu_check/) once with ``renderer.type=gsplat`` and once with
``renderer.type=torch`` and prints ms/step, peak GPU memory and final test PSNR of each, the
image and gradient agreement of the two backends on the first test camera (rendering the
gsplat-trained Gaussians), and PASS/FAIL lines:

- PSNR: the two runs' final test PSNR within 0.3 dB;
- images: the two backends' renders of the same Gaussians within 1e-3 (max abs, RGB in [0, 1]);
- gradients: per parameter group, 99% of the Gaussians within 1e-3 of the largest gradient
  (the largest difference is printed too: a few Gaussians whose footprint crosses a cut-off,
  alpha 1/255 or a tile edge, the two backends decide differently in float32 differ more).

Without a CUDA device it runs its CPU part (the environment report)
and prints "no CUDA device" for the rest. Exit code 1 when a check fails.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from splattrain.engine import load_config  # noqa: E402
from splattrain.console import Console  # noqa: E402
from splattrain.engine import DefaultTrainer  # noqa: E402
from splattrain.render import build_renderer  # noqa: E402

PSNR_TOLERANCE_DB = 0.3
IMAGE_TOLERANCE = 1e-3
GRAD_TOLERANCE = 1e-3  # of the largest gradient of each group
GRAD_QUANTILE = 0.99  # share of the Gaussians that must be within GRAD_TOLERANCE


def report_environment() -> bool:
    """Print device, versions and whether gsplat's kernels load; True when CUDA is usable."""
    print(f"torch          {torch.__version__} (CUDA build {torch.version.cuda})")
    try:
        print(f"gsplat         {importlib.metadata.version('gsplat')}")
    except importlib.metadata.PackageNotFoundError:
        print("gsplat         not installed")
    cuda = torch.cuda.is_available()
    if not cuda:
        print("device         no CUDA device")
        return False
    props = torch.cuda.get_device_properties(0)
    print(f"device         {props.name}, {props.total_memory / 2**30:.1f} GiB, compute capability {props.major}.{props.minor}")
    import gsplat

    package = Path(gsplat.__file__).parent
    prebuilt = sorted(p.name for p in package.glob("csrc*.so")) + sorted(p.name for p in package.glob("csrc*.pyd"))
    print(f"gsplat kernels {'prebuilt (' + ', '.join(prebuilt) + ')' if prebuilt else 'not prebuilt: compiled on first use (JIT)'}")
    started = time.perf_counter()
    try:
        means = torch.zeros(1, 3, device="cuda") + torch.tensor([0.0, 0.0, 2.0], device="cuda")
        quats = torch.tensor([[1.0, 0.0, 0.0, 0.0]], device="cuda")
        scales = torch.full((1, 3), 0.1, device="cuda")
        Ks = torch.tensor([[[20.0, 0.0, 8.0], [0.0, 20.0, 8.0], [0.0, 0.0, 1.0]]], device="cuda")
        image, _, _ = gsplat.rasterization(means, quats, scales, torch.ones(1, device="cuda"),
                                           torch.ones(1, 3, device="cuda"), torch.eye(4, device="cuda")[None], Ks, 16, 16)
        torch.cuda.synchronize()
        print(f"gsplat load    OK in {time.perf_counter() - started:.1f} s (first call, including any compile)")
    except Exception as error:  # noqa: BLE001 - reported, the check fails below
        print(f"gsplat load    FAILED: {type(error).__name__}: {error}")
        return False
    return bool(image.sum() > 0)


def train(kind: str, device: str, steps: int, extra: List[str]) -> Tuple[DefaultTrainer, Dict[str, float]]:
    """Train the demo with ``renderer.type=kind`` on ``device``; the trainer and its figures."""
    shutil.rmtree(REPO / "outputs" / "gpu_check" / kind, ignore_errors=True)  # its own run, replaced each time
    overrides = [f"renderer.type={kind}", f"trainer.device={device}", f"trainer.max_steps={steps}",
                 f"output_dir={REPO / 'outputs' / 'gpu_check' / kind}", "writers=[]", *extra]
    cfg = load_config(REPO / "configs" / "demo.yaml", overrides)
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    results = trainer.train()
    if device == "cuda":
        torch.cuda.synchronize()
    figures = {
        "ms_step": 1000.0 * results["train_seconds"] / max(1, results["steps"]),
        "wall_s": time.perf_counter() - started,
        "peak_mib": torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else float("nan"),
        "psnr": results["psnr"],
        "gaussians": results["num_gaussians"],
    }
    return trainer, figures


def compare_backends(trainer: DefaultTrainer, device: torch.device) -> Dict[str, float]:
    """Render the trained Gaussians from the first test camera with gsplat and torch; the largest
    image difference and, per parameter group, the largest gradient difference / largest gradient."""
    batch = next(iter(trainer.data.test_batches()))
    out: Dict[str, float] = {}
    renders, grads = {}, {}
    for kind in ("gsplat", "torch"):
        renderer = build_renderer({"type": kind}, device)
        for param in trainer.model.params.values():
            param.grad = None
        result = renderer.render(trainer.model, batch["camera"], trainer.model.sh_degree, trainer.background)
        (result.rgb - batch["image"]).abs().mean().backward()
        renders[kind] = result.rgb.detach()
        grads[kind] = {n: p.grad.detach().clone() for n, p in trainer.model.params.items() if p.grad is not None}
    out["image max |diff|"] = float((renders["gsplat"] - renders["torch"]).abs().max())
    for name, reference in grads["torch"].items():
        scale = float(reference.abs().max()) or 1.0
        per_gaussian = (grads["gsplat"][name] - reference).abs().reshape(len(reference), -1).amax(dim=1) / scale
        out[f"grad {name} max |diff| / max |grad|"] = float(per_gaussian.max())
        out[f"grad {name} {GRAD_QUANTILE:.1%} quantile"] = float(torch.quantile(per_gaussian.float(), GRAD_QUANTILE))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000, help="training steps per run (demo: 2000)")
    args, extra = parser.parse_known_args()
    cuda = report_environment()
    if not cuda:
        print("training runs  no CUDA device: skipped (gsplat needs one)")
        print("agreement      no CUDA device: skipped")
        return 0
    runs = {}
    for kind in ("gsplat", "torch"):
        trainer, figures = train(kind, "cuda", args.steps, extra)
        runs[kind] = (trainer, figures)
        print(f"{kind:7s} {figures['ms_step']:8.2f} ms/step  peak {figures['peak_mib']:8.1f} MiB  "
              f"PSNR {figures['psnr']:6.2f} dB  {figures['gaussians']} Gaussians  ({figures['wall_s']:.0f} s wall)")
    agreement = compare_backends(runs["gsplat"][0], torch.device("cuda"))
    for key, value in agreement.items():
        print(f"{key:45s} {value:.2e}")
    checks = [
        ("PSNR within %.1f dB" % PSNR_TOLERANCE_DB,
         abs(runs["gsplat"][1]["psnr"] - runs["torch"][1]["psnr"]) <= PSNR_TOLERANCE_DB),
        ("images within %.0e" % IMAGE_TOLERANCE, agreement["image max |diff|"] <= IMAGE_TOLERANCE),
        ("gradients of %.1f%% of the Gaussians within %.0e of the largest" % (100 * GRAD_QUANTILE, GRAD_TOLERANCE),
         all(v <= GRAD_TOLERANCE for k, v in agreement.items() if k.endswith("quantile"))),
    ]
    for name, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    summary = {k: v[1] for k, v in runs.items()} | {"agreement": agreement}
    (REPO / "outputs" / "gpu_check" / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
