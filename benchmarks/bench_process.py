"""``splattrain process`` on the cup's 77 photos, compared with the capture's own COLMAP model.

    python benchmarks/bench_process.py [--scene DIR] [--out DIR] [--fit-steps N] [process options ...]

Without ``--scene`` the photos of ../shared/scenes/cup/images are copied to a temporary folder
and processed (into ``--out`` when given). Prints the registered images, the mean
reprojection error and each stage's seconds, then the camera poses against the shipped model
(sparse/0) after the similarity (scale, rotation, translation) that best maps the processed
camera centres onto the shipped ones: median and largest rotation error in degrees, median
and largest camera-centre error as a percentage of the scene extent (the largest distance
between two shipped camera centres). With ``--fit-steps N`` both scenes are also trained with
configs/colmap.yaml for N steps and their test PSNR compared.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CUP = REPO.parent / "shared" / "scenes" / "cup"


def poses(model_dir: Path) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """Image name -> (world-to-camera rotation [3,3], camera centre [3]) of a COLMAP model."""
    import pycolmap

    out = {}
    for image in pycolmap.Reconstruction(model_dir).images.values():
        if image.has_pose:
            pose = image.cam_from_world()
            out[image.name] = (pose.rotation.matrix(), np.asarray(image.projection_center()))
    return out


def similarity(source: np.ndarray, target: np.ndarray) -> Tuple[float, np.ndarray, np.ndarray]:
    """(s, R, t) minimising |s R source + t - target|^2 over the rows (Umeyama, 1991)."""
    mu_s, mu_t = source.mean(0), target.mean(0)
    a, b = source - mu_s, target - mu_t
    u, d, vt = np.linalg.svd(b.T @ a / len(a))
    sign = np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))])
    rotation = u @ sign @ vt
    scale = float(np.trace(np.diag(d) @ sign) / (a**2).sum(1).mean())
    return scale, rotation, mu_t - scale * rotation @ mu_s


def compare(processed: Path, reference: Path) -> Dict[str, float]:
    """Rotation (degrees) and centre (% of extent) errors of ``processed`` after alignment to ``reference``."""
    ours, theirs = poses(processed), poses(reference)
    names = sorted(set(ours) & set(theirs))
    src = np.stack([ours[n][1] for n in names])
    dst = np.stack([theirs[n][1] for n in names])
    scale, rotation, shift = similarity(src, dst)
    centres = (scale * (rotation @ src.T)).T + shift
    extent = max(np.linalg.norm(dst[i] - dst[j]) for i in range(len(dst)) for j in range(i + 1, len(dst)))
    centre_err = np.linalg.norm(centres - dst, axis=1) / extent * 100.0
    angles = []
    for name in names:
        aligned = ours[name][0] @ rotation.T  # world-to-camera after the world was rotated by R
        cos = (np.trace(aligned @ theirs[name][0].T) - 1.0) / 2.0
        angles.append(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))))
    return {"compared": len(names), "rotation_median_deg": float(np.median(angles)),
            "rotation_max_deg": float(np.max(angles)), "centre_median_pct": float(np.median(centre_err)),
            "centre_max_pct": float(np.max(centre_err))}


def fit_psnr(scene: Path, steps: int, run_dir: Path) -> float:
    """Test PSNR of configs/colmap.yaml trained for ``steps`` on ``scene``."""
    subprocess.run([sys.executable, "-m", "splattrain", "fit", "--config", "configs/colmap.yaml", f"data.path={scene}",
                    f"trainer.max_steps={steps}", f"output_dir={run_dir}", "writers=[]", "--quiet"],
                   cwd=REPO, check=True)
    return float(json.loads((run_dir / "results.json").read_text())["psnr"])


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, help="an already processed cup folder (skips processing)")
    parser.add_argument("--out", type=Path, help="where to process to (default: a temporary folder)")
    parser.add_argument("--fit-steps", type=int, default=0, help="also train both scenes for N steps")
    args, options = parser.parse_known_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench_process_"))
    scene = args.scene
    if scene is None:
        photos = work / "photos"
        shutil.copytree(CUP / "images", photos)
        scene = args.out or work / "scene"
        subprocess.run([sys.executable, "-m", "splattrain", "process", str(photos), str(scene), *options],
                       cwd=REPO, check=True)
    summary = json.loads((scene / "colmap" / "summary.json").read_text())
    print(f"registered {summary['registered']}/{summary['images']}  points {summary['points']}  "
          f"mean reprojection error {summary['mean_reprojection_error_px']:.3f} px  "
          f"(shipped model: {summary['images']} registered)")
    print("seconds: " + "  ".join(f"{k} {v:.1f}" for k, v in summary["seconds"].items())
          + f"  total {sum(summary['seconds'].values()):.1f}")
    figures = compare(scene / "sparse" / "0", CUP / "sparse" / "0")
    print(f"poses vs shipped sparse/0 ({figures['compared']} images, similarity-aligned): rotation median "
          f"{figures['rotation_median_deg']:.3f} deg (max {figures['rotation_max_deg']:.3f}), camera centre median "
          f"{figures['centre_median_pct']:.3f}% of extent (max {figures['centre_max_pct']:.3f}%)")
    if args.fit_steps:
        ours = fit_psnr(scene, args.fit_steps, work / "fit_processed")
        theirs = fit_psnr(CUP, args.fit_steps, work / "fit_shipped")
        print(f"fit {args.fit_steps} steps, test PSNR: processed {ours:.2f} dB, shipped {theirs:.2f} dB "
              f"(difference {ours - theirs:+.2f} dB)")


if __name__ == "__main__":
    main(sys.argv[1:])
