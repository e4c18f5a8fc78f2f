"""``splattrain process`` on the cup's 77 photos, compared with the capture's own COLMAP model.

    python benchmarks/bench_process.py [--scene DIR] [--out DIR] [--fit-steps N] [process options ...]

Without ``--scene`` the photos of ../shared/scenes/cup/images are copied to a temporary folder
and processed (into ``--out`` when given). Prints the registered images, the mean
reprojection error and each stage's seconds, then the camera poses against the shipped model
(sparse/0) after a similarity alignment (scale, rotation, translation), two ways: the one that
best maps the processed camera centres onto the shipped ones (Umeyama), and the one whose
rotation best maps the camera orientations (scale and shift then from the centres). For each:
median and largest rotation error in degrees, median and largest camera-centre error as a
percentage of the scene extent (the largest distance between two shipped camera centres);
and the alignment-free median error of the relative rotation between every pair of cameras. With ``--fit-steps N`` both scenes are also trained with
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


def orientation_similarity(ours: List[np.ndarray], theirs: List[np.ndarray], source: np.ndarray,
                           target: np.ndarray) -> Tuple[float, np.ndarray, np.ndarray]:
    """(s, R, t) with R the rotation that best maps the camera orientations (least squares over
    the rotation matrices, R_ours R^T ~ R_theirs), then s and t the best for the centres given R."""
    u, _, vt = np.linalg.svd(sum(b.T @ a for a, b in zip(ours, theirs)))
    rotation = u @ np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))]) @ vt
    mu_s, mu_t = source.mean(0), target.mean(0)
    a, b = (rotation @ (source - mu_s).T).T, target - mu_t
    scale = float((a * b).sum() / (a * a).sum())
    return scale, rotation, mu_t - scale * rotation @ mu_s


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.degrees(np.arccos(np.clip((np.trace(a @ b.T) - 1.0) / 2.0, -1.0, 1.0))))


def compare(processed: Path, reference: Path) -> Dict[str, Dict[str, float]]:
    """Rotation (degrees) and centre (% of extent) errors of ``processed`` against ``reference``
    after each of two similarity alignments: Umeyama on the camera centres alone, and the
    rotation from the camera orientations with scale and shift from the centres. Also the
    alignment-free median error of the relative rotations between all pairs of cameras."""
    ours, theirs = poses(processed), poses(reference)
    names = sorted(set(ours) & set(theirs))
    src = np.stack([ours[n][1] for n in names])
    dst = np.stack([theirs[n][1] for n in names])
    extent = max(np.linalg.norm(dst[i] - dst[j]) for i in range(len(dst)) for j in range(i + 1, len(dst)))
    results = {}
    for label, (scale, rotation, shift) in {
        "centres": similarity(src, dst),
        "orientations": orientation_similarity([ours[n][0] for n in names], [theirs[n][0] for n in names], src, dst),
    }.items():
        centre_err = np.linalg.norm((scale * (rotation @ src.T)).T + shift - dst, axis=1) / extent * 100.0
        angles = [_angle(ours[n][0] @ rotation.T, theirs[n][0]) for n in names]  # world rotated by R
        results[label] = {"rotation_median_deg": float(np.median(angles)), "rotation_max_deg": float(np.max(angles)),
                          "centre_median_pct": float(np.median(centre_err)), "centre_max_pct": float(np.max(centre_err))}
    relative = [_angle(ours[a][0] @ ours[b][0].T, theirs[a][0] @ theirs[b][0].T)
                for i, a in enumerate(names) for b in names[i + 1:]]
    results["relative"] = {"compared": len(names), "rotation_median_deg": float(np.median(relative))}
    return results


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
          )
    print("seconds: " + "  ".join(f"{k} {v:.1f}" for k, v in summary["seconds"].items())
          + f"  total {sum(summary['seconds'].values()):.1f}")
    figures = compare(scene / "sparse" / "0", CUP / "sparse" / "0")
    print(f"poses vs shipped sparse/0, {figures['relative']['compared']} images in both; similarity-aligned by")
    for label, f in figures.items():
        if label != "relative":
            print(f"  {label:<12}: rotation median {f['rotation_median_deg']:.3f} deg (max {f['rotation_max_deg']:.3f}), "
                  f"camera centre median {f['centre_median_pct']:.3f}% of extent (max {f['centre_max_pct']:.3f}%)")
    print(f"  relative rotations of all camera pairs (no alignment): median "
          f"{figures['relative']['rotation_median_deg']:.3f} deg")
    if args.fit_steps:
        ours = fit_psnr(scene, args.fit_steps, work / "fit_processed")
        theirs = fit_psnr(CUP, args.fit_steps, work / "fit_shipped")
        print(f"fit {args.fit_steps} steps, test PSNR: processed {ours:.2f} dB, shipped {theirs:.2f} dB "
              f"(difference {ours - theirs:+.2f} dB)")


if __name__ == "__main__":
    main(sys.argv[1:])
