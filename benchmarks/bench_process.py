"""``splattrain process`` on the cup's 77 photos, compared with the capture's own COLMAP model.

    python benchmarks/bench_process.py [--scene DIR] [--out DIR] [--fit-steps N [--seeds 42,7,1]] [process options ...]

Without ``--scene`` the photos of ../shared/scenes/cup/images are copied to a temporary folder
and processed (into ``--out`` when given) with the process options given. Prints the registered
images, the mean reprojection error and each stage's seconds, then the camera poses against the
shipped model (sparse/0) after one similarity alignment, the least-squares fit of the camera
centres (COLMAP's model comparer): median and largest rotation error in degrees and camera-centre
error in % of the scene extent (the largest distance between two shipped camera centres). With
``--fit-steps N`` both scenes are trained with configs/colmap.yaml for N steps with each seed
(the same test views in both, checked by name) and their test PSNR compared.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np
import pycolmap

REPO = Path(__file__).resolve().parents[1]
CUP = REPO.parent / "shared" / "scenes" / "cup"


def poses(model: Any) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """Image name -> (world-to-camera rotation [3,3], camera centre [3]) of a pycolmap Reconstruction."""
    out = {}
    for image in model.images.values():
        if image.has_pose:
            out[image.name] = (image.cam_from_world().rotation.matrix(), np.asarray(image.projection_center()))
    return out


def extent(centres: np.ndarray) -> float:
    """The scene extent: the largest distance between two camera centres."""
    return float(max(np.linalg.norm(centres - c, axis=1).max() for c in centres))


def _angle(a: np.ndarray, b: np.ndarray) -> float:
    """Angle in degrees of the rotation between rotation matrices ``a`` and ``b``."""
    return float(np.degrees(np.arccos(np.clip((np.trace(a @ b.T) - 1.0) / 2.0, -1.0, 1.0))))


def orientation_rotation(ours: List[np.ndarray], theirs: List[np.ndarray]) -> np.ndarray:
    """The world rotation R that best maps the camera orientations (least squares, R_ours R^T ~ R_theirs)."""
    u, _, vt = np.linalg.svd(sum(b.T @ a for a, b in zip(ours, theirs)))
    return u @ np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))]) @ vt


def compare(processed: Path, reference: Path) -> Dict[str, float]:
    """Pose errors of ``processed`` against ``reference`` (two COLMAP model folders).

    One similarity (scale, rotation, shift) aligns the processed model to the reference: the
    least-squares fit of the camera centres, with every camera an inlier (COLMAP's model
    comparer, ``alignment_error=proj_center``). The same alignment gives each camera's
    rotation error (degrees) and centre error (% of the reference's extent). Also: the
    alignment-free median error of the relative rotation between every pair of cameras, and
    the angle between the alignment's rotation and the rotation that best maps the camera
    orientations alone (zero when both models have the same shape).
    """
    pycolmap.logging.minloglevel = 2
    ours_model, theirs_model = pycolmap.Reconstruction(processed), pycolmap.Reconstruction(reference)
    ours, theirs = poses(ours_model), poses(theirs_model)
    names = sorted(set(ours) & set(theirs))
    size = extent(np.stack([theirs[n][1] for n in names]))
    sim = pycolmap.align_reconstructions_via_proj_centers(ours_model, theirs_model, max_proj_center_error=size)
    scale, rotation, shift = sim.scale, sim.rotation.matrix(), np.asarray(sim.translation)
    centre_err = [np.linalg.norm(scale * rotation @ ours[n][1] + shift - theirs[n][1]) / size * 100.0 for n in names]
    angles = [_angle(ours[n][0] @ rotation.T, theirs[n][0]) for n in names]  # the world turned by the alignment
    relative = [_angle(ours[a][0] @ ours[b][0].T, theirs[a][0] @ theirs[b][0].T)
                for i, a in enumerate(names) for b in names[i + 1:]]
    by_orientation = orientation_rotation([ours[n][0] for n in names], [theirs[n][0] for n in names])
    return {"compared": len(names), "extent": size,
            "rotation_median_deg": float(np.median(angles)), "rotation_max_deg": float(np.max(angles)),
            "centre_median_pct": float(np.median(centre_err)), "centre_max_pct": float(np.max(centre_err)),
            "relative_rotation_median_deg": float(np.median(relative)),
            "orientation_offset_deg": _angle(rotation, by_orientation)}


def fit(scene: Path, steps: int, seed: int, run_dir: Path) -> Dict[str, Any]:
    """results.json of configs/colmap.yaml trained for ``steps`` with ``seed`` on ``scene``."""
    subprocess.run([sys.executable, "-m", "splattrain", "fit", "--config", "configs/colmap.yaml", f"data.path={scene}",
                    f"trainer.max_steps={steps}", f"seed={seed}", f"output_dir={run_dir}", "writers=[]",
                    "metrics.lpips=false", "--quiet"], cwd=REPO, check=True)
    return json.loads((run_dir / "results.json").read_text())


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, help="an already processed cup folder (skips processing)")
    parser.add_argument("--out", type=Path, help="where to process to (default: a temporary folder)")
    parser.add_argument("--fit-steps", type=int, default=0, help="also train both scenes for N steps")
    parser.add_argument("--seeds", default="42", help="comma-separated training seeds for --fit-steps (default 42)")
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
    print(f"options: {summary['options']}")
    print(f"registered {summary['registered']}/{summary['images']}  points {summary['points']}  "
          f"mean reprojection error {summary['mean_reprojection_error_px']:.3f} px")
    print("seconds: " + "  ".join(f"{k} {v:.1f}" for k, v in summary["seconds"].items())
          + f"  total {sum(summary['seconds'].values()):.1f}")
    f = compare(scene / "sparse" / "0", CUP / "sparse" / "0")
    print(f"poses vs shipped sparse/0, {f['compared']} images in both, aligned by the camera centres "
          f"(extent {f['extent']:.3f}):")
    print(f"  rotation median {f['rotation_median_deg']:.3f} deg (max {f['rotation_max_deg']:.3f}), "
          f"camera centre median {f['centre_median_pct']:.3f}% of extent (max {f['centre_max_pct']:.3f}%)")
    print(f"  relative rotations of all camera pairs (no alignment): median {f['relative_rotation_median_deg']:.3f} deg; "
          f"centre-fit vs orientation-fit world rotation: {f['orientation_offset_deg']:.3f} deg")
    if args.fit_steps:
        gaps = []
        for seed in (int(x) for x in args.seeds.split(",")):
            ours = fit(scene, args.fit_steps, seed, work / f"fit_processed_{seed}")
            theirs = fit(CUP, args.fit_steps, seed, work / f"fit_shipped_{seed}")
            views = [[v["view"] for v in r["per_view"]] for r in (ours, theirs)]
            if views[0] != views[1]:
                sys.exit(f"the test views differ: processed {views[0]}, shipped {views[1]}")
            gaps.append(ours["psnr"] - theirs["psnr"])
            print(f"fit {args.fit_steps} steps, seed {seed}, test PSNR on the same {len(views[0])} views: "
                  f"processed {ours['psnr']:.2f} dB, shipped {theirs['psnr']:.2f} dB (difference {gaps[-1]:+.2f} dB)")
        print(f"mean difference over {len(gaps)} seed(s): {np.mean(gaps):+.2f} dB")


if __name__ == "__main__":
    main(sys.argv[1:])
