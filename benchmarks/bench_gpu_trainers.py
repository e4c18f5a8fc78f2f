"""splattrain's GPU path against gsplat's own trainer, on one COLMAP or NeRF-synthetic scene at full resolution.

    python benchmarks/bench_gpu_trainers.py --gsplat-examples GSPLAT/examples [--scene DIR]
        [--steps N] [--strategies default mcmc] [--cap-max 1000000] [--only splattrain|gsplat]
        [dotted.key=value ...]

For each strategy (gsplat's ``default`` and ``mcmc``) it trains the scene (default: the cup,
``../shared/scenes/cup``; ``--scene ../shared/scenes/lego`` for NeRF-synthetic lego) for
``--steps`` steps (default 7000 for a COLMAP scene, 30000, the 3DGS protocol, for a Blender one)
twice on the CUDA device:

- splattrain: the scene's preset (``configs/colmap.yaml``, or ``configs/blender.yaml`` for a folder
  with ``transforms_train.json``) with ``data.downscale=1 trainer.resolution.schedule=null
  renderer.type=gsplat`` (full size from the first step, as gsplat trains) (in this process;
  extra ``dotted.key=value`` arguments go to it), mcmc as gsplat's mcmc preset sets it (starting
  opacity 0.5, starting scale 0.1, ``--cap-max`` Gaussians);
- gsplat: its ``examples/simple_trainer.py default|mcmc`` with ``--data_factor 1``, the same
  training views and the refinement schedule splattrain's preset uses at that run length
  (``--strategy.refine-start-iter`` ...), so both densify on the same steps. A COLMAP scene is
  read as it is, every 8th image by name held out as splattrain does; gsplat reads no Blender
  folder, so a Blender scene is written as a COLMAP project first (``gsplat_project.py``: the
  training views over black, the background gsplat renders with, and splattrain's starting
  points as its sparse points).

It prints, for both: ms/step (training time over steps: splattrain's ``train_seconds``, gsplat's
``ellipse_time`` at its last step), peak GPU memory (``torch.cuda.max_memory_allocated``), test
PSNR / SSIM / LPIPS and the Gaussians. gsplat's final checkpoint is moved from its normalized
frame into splattrain's and scored by splattrain's renderer and metrics on splattrain's test views
(lego: all 200, over white; gsplat's own figures, for a Blender scene of its one held-out view, are
printed beside them). The ratio of the two ms/step figures is the
comparison that matters: splattrain's step should be within 10% of gsplat's own.

gsplat's trainer is not part of the ``gsplat`` package on the package index: it lives in gsplat's
GitHub repository (``examples/``), with requirements of its own. Without ``--gsplat-examples``
(or the ``GSPLAT_EXAMPLES`` environment variable) pointing at that folder, the script says how
to get it. LPIPS needs its weight files; a machine without network takes them from
``metrics.lpips_weights=DIR`` or torch's hub cache (``splattrain download-weights lpips``).
docs/gpu.md says how to run it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # gsplat_project.py beside it

OUT = REPO / "outputs" / "bench_gpu_trainers"
DEFAULT_SCENE = REPO.parent / "shared" / "scenes" / "cup"
#: The preset and default run length of each kind of scene.
PRESETS = {"colmap": (REPO / "configs" / "colmap.yaml", 7000), "blender": (REPO / "configs" / "blender.yaml", 30000)}
STRATEGIES = ("default", "mcmc")
#: gsplat's mcmc preset (simple_trainer.py): starting opacity and scale factor.
MCMC_INIT = {"opacity": 0.5, "scale_factor": 0.1}


def gsplat_version() -> str:
    try:
        return importlib.metadata.version("gsplat")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def how_to_get_trainer(reason: str) -> str:
    """What to do when gsplat's example trainer is not at hand."""
    version = gsplat_version()
    tag = f"v{version}" if version[:1].isdigit() else "v1.5.3"
    return (
        f"gsplat's own trainer is needed: {reason}.\n"
        "It is not in the pip package: it is examples/simple_trainer.py in gsplat's GitHub repository.\n"
        f"  git clone --depth 1 --branch {tag} https://github.com/nerfstudio-project/gsplat gsplat-src\n"
        "  pip install -r gsplat-src/examples/requirements.txt     (on a machine with network; "
        "or pip download the wheels there and install them offline)\n"
        "then run this script with --gsplat-examples gsplat-src/examples (or GSPLAT_EXAMPLES=...).\n"
        f"Use the tag of the installed gsplat ({version}) so that the trainer and the kernels match."
    )


class MissingTrainer(Exception):
    """gsplat's example trainer is not at hand (the message says how to get it)."""


def find_trainer(examples: Optional[Path]) -> Path:
    """``examples/simple_trainer.py``, or :class:`MissingTrainer` saying how to get it."""
    if examples is None:
        raise MissingTrainer(how_to_get_trainer("no --gsplat-examples DIR was given (nor GSPLAT_EXAMPLES)"))
    trainer = examples / "simple_trainer.py"
    if not trainer.is_file():
        raise MissingTrainer(how_to_get_trainer(f"{trainer} does not exist"))
    if not (examples / "datasets" / "colmap.py").is_file():
        raise MissingTrainer(how_to_get_trainer(f"{examples / 'datasets' / 'colmap.py'} (its COLMAP reader) does not exist"))
    return trainer


def check_trainer_imports(examples: Path) -> None:
    """Import gsplat's trainer module (not run) in a child process: :class:`MissingTrainer` naming
    what does not import."""
    done = subprocess.run([sys.executable, "-c", "import simple_trainer"], cwd=examples, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise MissingTrainer(how_to_get_trainer(f"its modules do not import here ({last})"))


def scene_kind(scene: Path) -> str:
    """``blender`` for a folder with transforms_train.json, else ``colmap``."""
    return "blender" if (scene / "transforms_train.json").is_file() else "colmap"


def preset(scene: Path) -> Path:
    """The preset file splattrain trains ``scene`` with."""
    return PRESETS[scene_kind(scene)][0]


def scene_overrides(scene: Path) -> List[str]:
    """The scene's preset at its full resolution, from the first step (no coarse-to-fine start: gsplat's
    trainer has none, and the step times compare full-size steps)."""
    return [f"data.path={scene}", "data.downscale=1", "trainer.resolution.schedule=null"]


def splattrain_overrides(scene: Path, steps: int, strategy: str, out: Path, schedule: Dict[str, float],
                         cap_max: int) -> List[str]:
    """The preset's overrides for one full-resolution gsplat run of splattrain; mcmc with the
    preset's refinement steps (``schedule``) and gsplat's mcmc starting opacity and scale."""
    overrides = [*scene_overrides(scene), "renderer.type=gsplat", "trainer.device=cuda",
                 f"trainer.max_steps={steps}", f"output_dir={out}", "writers=[]",
                 f"default_hooks.checkpoint.interval={steps}"]
    if strategy == "mcmc":
        steps_of = ", ".join(f"{key}: {schedule[key]}" for key in ("refine_start_iter", "refine_stop_iter", "refine_every"))
        overrides += [f"strategy={{type: mcmc, max_gaussians: {cap_max}, {steps_of}}}",
                      "loss.terms=null",  # the photometric default plus MCMC's own regularisers, as gsplat's mcmc
                      f"model.init.opacity={MCMC_INIT['opacity']}", f"model.init.scale_factor={MCMC_INIT['scale_factor']}"]
    return overrides


def matched_schedule(scene: Path, steps: int) -> Dict[str, float]:
    """The refinement schedule of the scene's preset at ``steps`` steps (scaled as a run gets it)
    and the weight of its opacity regulariser (gsplat's ``opacity_reg``; 0 without one)."""
    from splattrain.engine import load_config
    from splattrain.strategy.build import build_strategy

    cfg = load_config(preset(scene), [*scene_overrides(scene), f"trainer.max_steps={steps}"])
    strategy = build_strategy(cfg.strategy)  # its window as a run has it (refine_stop_max applied)
    return {"refine_start_iter": int(strategy.refine_start_iter), "refine_stop_iter": int(strategy.refine_stop_iter),
            "refine_every": int(strategy.refine_every), "reset_every": int(strategy.reset_every),
            "sh_degree_interval": int(cfg.model.sh_degree_interval),
            "opacity_reg": float(sum(t["weight"] for t in (cfg.loss.terms or []) if t["type"] == "opacity_reg"))}


def gsplat_command(trainer: Path, strategy: str, scene: Path, steps: int, result: Path, schedule: Dict[str, float],
                   cap_max: int, test_every: int = 8) -> List[str]:
    """gsplat's ``simple_trainer.py`` on the COLMAP project ``scene`` at full resolution, every
    ``test_every``-th image held out, evaluated and saved only at the last step."""
    command = [sys.executable, str(trainer), strategy, "--data_dir", str(scene), "--data_factor", "1",
               "--result_dir", str(result), "--test_every", str(test_every), "--max_steps", str(steps),
               "--eval_steps", str(steps), "--save_steps", str(steps), "--disable_viewer", "--disable_video",
               # gsplat divides the step by it: 1 raises the degree every step, so degree 3 from step 3
               "--sh_degree_interval", str(max(1, schedule["sh_degree_interval"])),
               "--strategy.refine-start-iter", str(schedule["refine_start_iter"]),
               "--strategy.refine-stop-iter", str(schedule["refine_stop_iter"]),
               "--strategy.refine-every", str(schedule["refine_every"])]
    if strategy == "default":
        command += ["--strategy.reset-every", str(schedule["reset_every"]), "--opacity_reg", str(schedule["opacity_reg"])]
    else:
        command += ["--strategy.cap-max", str(cap_max)]
    return command


def gsplat_transform(examples: Path, scene: Path) -> List[List[float]]:
    """The 4x4 matrix gsplat's COLMAP parser maps the scene's world into its training frame with."""
    code = ("import json, sys\nfrom datasets.colmap import Parser\n"
            "parser = Parser(data_dir=sys.argv[1], factor=1, normalize=True, test_every=8)\n"
            "print(json.dumps(parser.transform.tolist()))")
    done = subprocess.run([sys.executable, "-c", code, str(scene)], cwd=examples, check=True, capture_output=True,
                          text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def into_splattrain_frame(params, gsplat_matrix, splattrain_matrix):
    """gsplat's Gaussians (in its normalized frame) moved into splattrain's training frame:
    ``splattrain_matrix @ inverse(gsplat_matrix)``, both maps of the dataset's own world."""
    import torch

    from splattrain.model.transform import transform_gaussians

    matrix = torch.as_tensor(splattrain_matrix, dtype=torch.float64) @ torch.linalg.inv(
        torch.as_tensor(gsplat_matrix, dtype=torch.float64))
    return transform_gaussians(params, matrix)


def run_splattrain(scene: Path, steps: int, strategy: str, schedule: Dict[str, float], cap_max: int,
                   extra: Sequence[str]) -> Dict[str, float]:
    import torch

    from splattrain.console import Console
    from splattrain.engine import DefaultTrainer, load_config

    out = OUT / f"splattrain_{strategy}"
    shutil.rmtree(out, ignore_errors=True)  # this benchmark's own run, replaced each time
    cfg = load_config(preset(scene), [*splattrain_overrides(scene, steps, strategy, out, schedule, cap_max), *extra])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    torch.cuda.reset_peak_memory_stats()
    results = trainer.train()
    torch.cuda.synchronize()
    return {"ms_step": 1000.0 * results["train_seconds"] / max(1, results["steps"]),
            "peak_mib": torch.cuda.max_memory_allocated() / 2**20, "psnr": results["psnr"], "ssim": results["ssim"],
            "lpips": results["lpips"], "gaussians": results["num_gaussians"]}


def gsplat_data(scene: Path, extra: Sequence[str] = (), write: bool = True) -> Tuple[Path, int]:
    """The COLMAP project gsplat trains on and its ``test_every``: a COLMAP scene itself (8), a
    Blender scene's project (written into OUT/gsplat_project unless not ``write``)."""
    if scene_kind(scene) == "colmap":
        return scene, 8
    import gsplat_project
    from splattrain.engine import load_config

    folder = OUT / "gsplat_project"
    if not write:
        return folder, 1 + len(json.loads((scene / "transforms_train.json").read_text())["frames"])
    shutil.rmtree(folder, ignore_errors=True)  # this benchmark's own copy, replaced each time
    return folder, gsplat_project.write_project(load_config(preset(scene), [*scene_overrides(scene), *extra]), folder)


def run_gsplat(trainer: Path, strategy: str, data: Tuple[Path, int], steps: int, schedule: Dict[str, float],
               cap_max: int) -> Dict[str, float]:
    result = OUT / f"gsplat_{strategy}"
    shutil.rmtree(result, ignore_errors=True)  # this benchmark's own run, replaced each time
    command = gsplat_command(trainer, strategy, data[0], steps, result, schedule, cap_max, data[1])
    print("  " + " ".join(command[1:]))
    started = time.perf_counter()
    subprocess.run(command, cwd=trainer.parent, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    last = steps - 1  # gsplat numbers its steps from 0
    train = json.loads((result / "stats" / f"train_step{last:04d}_rank0.json").read_text())
    own = json.loads((result / "stats" / f"val_step{last:04d}.json").read_text())
    return {"ms_step": 1000.0 * train["ellipse_time"] / steps, "peak_mib": train["mem"] * 1024.0,
            "gaussians": int(train["num_GS"]), "wall": wall, "own_psnr": own["psnr"], "own_ssim": own["ssim"],
            "own_lpips": own["lpips"], "checkpoint": result / "ckpts" / f"ckpt_{last}_rank0.pt"}


def score_gsplat(checkpoint: Path, gsplat_matrix, scene: Path, extra: Sequence[str]) -> Dict[str, Optional[float]]:
    """gsplat's final Gaussians scored by splattrain on its own test views (gsplat renderer, its metrics)."""
    import torch

    from splattrain.data.loading import load_scene
    from splattrain.data.pipeline import DataPipeline
    from splattrain.engine import load_config
    from splattrain.metrics import Evaluator, mean_metrics
    from splattrain.model.gaussians import GaussianModel
    from splattrain.render import build_renderer

    cfg = load_config(preset(scene), [*scene_overrides(scene), *extra])
    device = torch.device("cuda")
    background = torch.tensor(list(cfg.data.background), dtype=torch.float32, device=device)
    views = DataPipeline(load_scene(cfg.data)[1], background, device, prefetch=False)
    splats = torch.load(checkpoint, map_location="cpu", weights_only=True)["splats"]
    params = into_splattrain_frame({k: v.float() for k, v in splats.items()}, gsplat_matrix, views.world_transform)
    degree = int(round(((params["shN"].shape[1] + 1) ** 0.5))) - 1
    model = GaussianModel(params, degree).to(device)
    renderer = build_renderer({"type": "gsplat"}, device)
    metrics = cfg.metrics
    evaluator = Evaluator(bool(metrics.lpips), metrics.lpips_net, device, print, metrics.lpips_weights,
                          bool(metrics.lpips_download))
    with torch.no_grad():
        per_view = [evaluator(renderer.render(model, batch["camera"], degree, background).rgb, batch["image"])
                    for batch in views.test_batches()]
    return mean_metrics(per_view)


def row(name: str, figures: Dict[str, Optional[float]]) -> str:
    def show(value, fmt):
        return "null" if value is None else format(value, fmt)

    return (f"{name:28s} {figures['ms_step']:8.2f} {figures['peak_mib']:9.1f} {show(figures['psnr'], '7.2f')} "
            f"{show(figures['ssim'], '7.4f')} {show(figures['lpips'], '6.3f')} {figures['gaussians']:>10,d}")


def parse_args(argv: Optional[Sequence[str]] = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gsplat-examples", type=Path, default=os.environ.get("GSPLAT_EXAMPLES") or None,
                        help="gsplat's examples/ folder (its GitHub repository), holding simple_trainer.py")
    parser.add_argument("--scene", type=Path, default=DEFAULT_SCENE,
                        help="a COLMAP or NeRF-synthetic scene (default: the cup; lego: ../shared/scenes/lego)")
    parser.add_argument("--steps", type=int, help="training steps of every run (default: 7000 for a COLMAP "
                        "scene, 30000 for a NeRF-synthetic one)")
    parser.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=list(STRATEGIES))
    parser.add_argument("--cap-max", type=int, default=1_000_000, help="mcmc: the Gaussians both grow to")
    parser.add_argument("--only", choices=("splattrain", "gsplat"), help="run one trainer only")
    parser.add_argument("--dry-run", action="store_true", help="print both trainers' command lines, train nothing")
    args, extra = parser.parse_known_args(argv)
    if not (args.scene / "sparse").is_dir() and scene_kind(args.scene) != "blender":
        parser.error(f"--scene {args.scene}: not a COLMAP scene (no sparse/ folder) nor a NeRF-synthetic one "
                     "(no transforms_train.json)")
    args.steps = PRESETS[scene_kind(args.scene)][1] if args.steps is None else args.steps
    if args.steps < 100:
        parser.error(f"--steps must be at least 100 (the refinement schedule needs room), got {args.steps}")
    if args.cap_max <= 0:
        parser.error(f"--cap-max must be positive, got {args.cap_max}")
    bad = [a for a in extra if "=" not in a or a.startswith("-")]
    if bad:
        parser.error(f"unrecognized arguments: {' '.join(bad)} (splattrain's options are dotted.key=value)")
    return args, extra


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, extra = parse_args(argv)
    try:
        trainer = None if args.only == "splattrain" else find_trainer(args.gsplat_examples)
        if args.dry_run:
            return dry_run(args, extra, trainer)
        return measure(args, extra, trainer)
    except MissingTrainer as missing:
        print(missing, file=sys.stderr)
        return 2


def dry_run(args, extra: Sequence[str], trainer: Optional[Path]) -> int:
    """The command lines each run would use."""
    schedule = matched_schedule(args.scene, args.steps)
    print(f"schedule of both: {schedule}")
    data = gsplat_data(args.scene, extra, write=False)
    if data[0] != args.scene:
        print(f"gsplat's copy of the scene: {data[0]} (a COLMAP project, written when the runs start)")
    for strategy in args.strategies:
        if args.only != "gsplat":
            overrides = splattrain_overrides(args.scene, args.steps, strategy, OUT / f"splattrain_{strategy}",
                                             schedule, args.cap_max)
            print(f"splattrain {strategy}: splattrain fit --config {preset(args.scene).relative_to(REPO)} "
                  f"{' '.join([*overrides, *extra])}")
        if trainer is not None:
            command = gsplat_command(trainer, strategy, data[0], args.steps, OUT / f"gsplat_{strategy}", schedule,
                                     args.cap_max, data[1])
            print(f"gsplat {strategy}: {' '.join(command[1:])}")
    return 0


def measure(args, extra: Sequence[str], trainer: Optional[Path]) -> int:
    """Train and score every run; 1 without a CUDA device."""
    import torch

    print(f"torch {torch.__version__}, gsplat {gsplat_version()}, scene {args.scene}, {args.steps} steps")
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to measure (both trainers need one)")
        return 1
    print(f"device {torch.cuda.get_device_name(0)}")
    if trainer is not None:
        check_trainer_imports(trainer.parent)
    schedule = matched_schedule(args.scene, args.steps)
    print(f"schedule of both: {schedule}")
    data = gsplat_data(args.scene, extra) if trainer is not None else None
    summary: Dict[str, Dict] = {}
    for strategy in args.strategies:
        print(f"\n{strategy}: {'':14s}  ms/step  peak MiB    PSNR    SSIM  LPIPS  Gaussians")
        ours = None
        if args.only != "gsplat":
            ours = run_splattrain(args.scene, args.steps, strategy, schedule, args.cap_max, extra)
            print(row("splattrain (gsplat renderer)", ours))
            summary[strategy] = {"splattrain": ours}
        if trainer is not None:
            theirs = run_gsplat(trainer, strategy, data, args.steps, schedule, args.cap_max)
            scored = score_gsplat(theirs["checkpoint"], gsplat_transform(trainer.parent, data[0]), args.scene, extra)
            print(row("gsplat simple_trainer.py", {**theirs, **scored}))
            print(f"{'':28s} gsplat's own metrics: PSNR {theirs['own_psnr']:.2f}, SSIM {theirs['own_ssim']:.4f}, "
                  f"LPIPS {theirs['own_lpips']:.3f}; {theirs['wall']:.0f} s wall")
            summary.setdefault(strategy, {})["gsplat"] = {**{k: v for k, v in theirs.items() if k != "checkpoint"},
                                                          **scored}
        if ours is not None and trainer is not None:
            ratio = ours["ms_step"] / summary[strategy]["gsplat"]["ms_step"]
            summary[strategy]["ratio"] = ratio
            print(f"splattrain ms/step / gsplat ms/step: {ratio:.3f} ({'within' if ratio <= 1.10 else 'NOT within'} 10%)")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
