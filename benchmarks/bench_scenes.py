"""Train scene folders with the preset for their type and print one table row per scene.

    python benchmarks/bench_scenes.py PATH [PATH ...] --steps N [--preset auto|colmap|blender|mipnerf360]
                                      [dotted.key=value ...]

Each PATH may be a project root (the scene folder below it is found as ``splattrain fit`` finds
it). ``--preset auto`` uses configs/blender.yaml for Blender scenes and configs/colmap.yaml for
the rest; ``--steps`` sets ``trainer.max_steps`` and the preset's step settings follow it.
Runs write to outputs/bench_scenes/<folder name>/. Columns: type, views (train/test), image size,
steps, training seconds (steps only), test PSNR, SSIM, cc_psnr (PSNR after a per-view affine
colour fit) and the final number of Gaussians.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from splattrain.engine import load_config  # noqa: E402
from splattrain.config.schema import DataConfig  # noqa: E402
from splattrain.console import Console  # noqa: E402
from splattrain.data.loading import find_scene  # noqa: E402
from splattrain.engine import DefaultTrainer  # noqa: E402

COLUMNS = ["scene", "type", "views", "size", "steps", "train s", "PSNR", "SSIM", "cc_psnr", "Gaussians"]
QUIET = ["writers=[]", "metrics.lpips=false", "default_hooks.checkpoint.interval=0", "trainer.hook_timing=false"]


def scene_type(path: Path) -> str:
    """The reader that ``data.type: auto`` picks for ``path`` (after finding the scene below it)."""
    return find_scene(DataConfig(path=str(path)), None)[0]


RUNS = REPO / "outputs" / "bench_scenes" / time.strftime("%Y%m%d-%H%M%S")  # one folder per invocation


def train_scene(path: Path, steps: int, preset: str = "auto", overrides: Sequence[str] = (),
                name: str = "") -> Dict[str, Any]:
    """Train one scene; returns the table row's values and the trainer."""
    kind = scene_type(path)
    if preset == "auto":
        preset = "blender" if kind == "blender" else "colmap"
    name = name or path.name
    cfg = load_config(REPO / "configs" / f"{preset}.yaml", [
        f"data.path={path}", f"trainer.max_steps={steps}", f"output_dir={RUNS / name}",
        f"name={name}", *QUIET, *overrides,
    ])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    results = trainer.train()
    camera = trainer.data.train_cameras[0]
    return {
        "scene": name, "type": kind, "views": f"{len(trainer.data.train_frames)}/{len(trainer.data.test_frames)}",
        "size": f"{camera.width}x{camera.height}", "steps": results["steps"], "train s": results["train_seconds"],
        "PSNR": results["psnr"], "SSIM": results["ssim"], "cc_psnr": results["cc_psnr"],
        "Gaussians": results["num_gaussians"], "results": results, "trainer": trainer,
    }


def format_row(row: Dict[str, Any]) -> List[str]:
    """The row's cells as text."""
    def number(value: Any, digits: int) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    return [row["scene"], row["type"], row["views"], row["size"], str(row["steps"]), number(row["train s"], 1),
            number(row["PSNR"], 2), number(row["SSIM"], 4), number(row["cc_psnr"], 2), f"{row['Gaussians']:,}"]


def print_table(rows: List[List[str]], columns: List[str] = COLUMNS) -> None:
    """A plain-text table (Markdown pipes, so it pastes into docs)."""
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(v.ljust(w) for v, w in zip(row, widths)) + " |", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="scene folders (and dotted.key=value overrides)")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--preset", default="auto", choices=["auto", "colmap", "blender", "mipnerf360"])
    args, rest = parser.parse_known_args(argv)
    overrides = [p for p in args.paths + rest if "=" in p]
    paths = [Path(p) for p in args.paths if "=" not in p]
    rows = [format_row(train_scene(path, args.steps, args.preset, overrides)) for path in paths]
    print_table(rows)


if __name__ == "__main__":
    main()
