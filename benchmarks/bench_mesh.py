"""Mesh accuracy on the demo scene against its exact geometry.

    python benchmarks/bench_mesh.py [--steps 2000] [--out-dir outputs/bench_mesh] [--runs NAME,...]
                                    [--reuse] [--mesh-options "--voxel-size 0.01 ..."]

Trains the demo (``configs/demo.yaml``) once per setting below (output in ``--out-dir``, replaced
unless ``--reuse``), exports a mesh from each run with median and with expected depth
(``splattrain export --format mesh --world-frame original``), and scores every mesh against the
points where the demo's test cameras' rays meet its analytic surfaces
(:func:`splattrain.synthetic.demo_scene.depth_map`, the ray tracer that made the images), in the
dataset's own coordinates:

- accuracy: mean distance from the mesh to the true surface points (4 x 4 rays per pixel);
  completeness: mean distance
  from the true points to the mesh; Chamfer distance: the mean of the two;
- precision / recall: the share of mesh / true points within tau of the other set, F-score their
  harmonic mean, tau = 1% of the scene's extent (the diagonal of the true points' bounding box).

The mesh is sampled uniformly by area; only its parts the test cameras could see are scored
(a mesh point counts when, in some test view, it projects into the image and does not lie
behind the true surface by more than tau, as DTU's evaluation masks what the cameras observed).
Prints a table and writes ``results.json`` into ``--out-dir``.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
from scipy.spatial import cKDTree

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from splattrain.synthetic.demo_scene import depth_map  # noqa: E402
from splattrain.mesh.files import MeshArrays, read_mesh_ply  # noqa: E402

#: The trained settings: name -> loss terms (the demo's own L1 + D-SSIM, then the regularisers).
PHOTOMETRIC = "{type: l1, weight: 0.8}, {type: dssim, weight: 0.2}"
DISTORTION = "{type: depth_distortion, weight: 10, start_step: 500}"
NORMALS = "{type: normal_consistency, weight: 0.05, start_step: 500}"
RUNS = {"plain": [], "distortion": [DISTORTION], "normals": [NORMALS], "both": [DISTORTION, NORMALS]}
MESH_SAMPLES = 1_000_000
#: Rays per pixel side for the true surface points: 4 x 4 rays a pixel put them about 5 mm apart
#: (the demo's pixels span about 2 cm at the scene's centre), so that the distance from a mesh
#: point to the nearest true point measures the mesh, not the spacing of the true points.
SUPERSAMPLE = 4
THRESHOLD_SHARE = 0.01


def test_cameras(scene: Path) -> List[Tuple[np.ndarray, np.ndarray, int, int]]:
    """(world-to-camera [4,4] in OpenCV axes, K, width, height) of every test view, in the
    dataset's own coordinates (transforms_test.json)."""
    doc = json.loads((scene / "transforms_test.json").read_text())
    cameras = []
    for frame in doc["frames"]:
        c2w = np.array(frame["transform_matrix"], dtype=np.float64) @ np.diag([1.0, -1.0, -1.0, 1.0])
        from PIL import Image

        width, height = Image.open(scene / (frame["file_path"] + ".png")).size
        focal = 0.5 * width / math.tan(0.5 * doc["camera_angle_x"])
        K = np.array([[focal, 0.0, width / 2.0], [0.0, focal, height / 2.0], [0.0, 0.0, 1.0]])
        cameras.append((np.linalg.inv(c2w), K, width, height))
    return cameras


def true_surface(cameras, supersample: int = SUPERSAMPLE) -> Tuple[np.ndarray, List[np.ndarray]]:
    """The points where the cameras' rays (``supersample``^2 per pixel, on a regular grid) meet
    the exact surfaces, and each view's true depth map at its pixel centres."""
    points, depths = [], []
    for viewmat, K, width, height in cameras:
        depths.append(depth_map(viewmat, K, width, height).astype(np.float64))
        K = np.diag([supersample, supersample, 1.0]) @ K
        width, height = width * supersample, height * supersample
        depth = depth_map(viewmat, K, width, height).astype(np.float64)
        rows, cols = np.nonzero(depth > 0)
        z = depth[rows, cols]
        cam = np.stack([(cols + 0.5 - K[0, 2]) / K[0, 0] * z, (rows + 0.5 - K[1, 2]) / K[1, 1] * z, z], axis=1)
        points.append((cam - viewmat[:3, 3]) @ viewmat[:3, :3])
    return np.concatenate(points), depths


def sample_mesh(mesh: MeshArrays, count: int, seed: int = 0) -> np.ndarray:
    """``count`` points spread uniformly over the mesh's area."""
    corners = mesh.vertices.astype(np.float64)[mesh.faces]  # [F, 3, 3]
    areas = 0.5 * np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(areas), size=count, p=areas / areas.sum())
    u, v = rng.random(count), rng.random(count)
    flip = u + v > 1.0
    u, v = np.where(flip, 1.0 - u, u), np.where(flip, 1.0 - v, v)
    a, b, c = corners[chosen, 0], corners[chosen, 1], corners[chosen, 2]
    return a + u[:, None] * (b - a) + v[:, None] * (c - a)


def seen_by_cameras(points: np.ndarray, cameras, depths, tau: float) -> np.ndarray:
    """Whether each point lies in some test view's image, not behind the true surface by more than tau."""
    seen = np.zeros(len(points), dtype=bool)
    for (viewmat, K, width, height), depth in zip(cameras, depths):
        cam = points @ viewmat[:3, :3].T + viewmat[:3, 3]
        z = cam[:, 2]
        ahead = z > 1e-6
        u = np.where(ahead, cam[:, 0] / np.where(ahead, z, 1.0) * K[0, 0] + K[0, 2], -1.0)
        v = np.where(ahead, cam[:, 1] / np.where(ahead, z, 1.0) * K[1, 1] + K[1, 2], -1.0)
        inside = ahead & (u >= 0) & (u < width) & (v >= 0) & (v < height)
        cols, rows = np.clip(u.astype(np.int64), 0, width - 1), np.clip(v.astype(np.int64), 0, height - 1)
        surface = depth[rows, cols]
        seen |= inside & ((surface == 0) | (z <= surface + tau))
    return seen


def score(mesh_points: np.ndarray, truth: np.ndarray, tau: float) -> Dict[str, float]:
    """Accuracy, completeness, Chamfer distance, precision, recall and F-score at ``tau``."""
    to_truth = cKDTree(truth).query(mesh_points, workers=-1)[0]
    to_mesh = cKDTree(mesh_points).query(truth, workers=-1)[0]
    precision, recall = float((to_truth < tau).mean()), float((to_mesh < tau).mean())
    accuracy, completeness = float(to_truth.mean()), float(to_mesh.mean())
    return {
        "accuracy": accuracy, "completeness": completeness, "chamfer": 0.5 * (accuracy + completeness),
        "precision": precision, "recall": recall,
        "fscore": 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall),
    }


def evaluate_mesh(path: Path, scene: Path) -> Dict[str, float]:
    """The measures of the mesh at ``path`` (in the dataset's frame) against the demo's true surface."""
    cameras = test_cameras(scene)
    truth, depths = true_surface(cameras)
    extent = float(np.linalg.norm(truth.max(0) - truth.min(0)))
    tau = THRESHOLD_SHARE * extent
    mesh = read_mesh_ply(path)
    points = sample_mesh(mesh, MESH_SAMPLES)
    kept = seen_by_cameras(points, cameras, depths, tau)
    result = score(points[kept], truth, tau)
    result.update(extent=extent, tau=tau, true_points=len(truth), mesh_points=int(kept.sum()),
                  triangles=len(mesh.faces))
    return result


def depth_errors(run: Path) -> Dict[str, float]:
    """Rendered depth against the exact depth on the run's test views, per depth kind: the median
    signed error (bias) and the median absolute error over the pixels both cover, split into
    pixels at depth edges (a neighbour's true depth differs by over 5%, or is background) and
    the rest; in the dataset's units."""
    import torch

    from splattrain.commands.snapshot import load_snapshot

    snapshot = load_snapshot(run, "cpu")
    renderer = snapshot.renderer()
    transform = snapshot.checkpoint.get("world_transform")
    matrix = np.eye(4) if transform is None else torch.as_tensor(transform, dtype=torch.float64).numpy()
    scale = float(np.cbrt(np.linalg.det(matrix[:3, :3])))
    errors: Dict[str, Dict[str, list]] = {kind: {"all": [], "edge": [], "inner": []} for kind in ("expected", "median")}
    for frame in snapshot.scene().test:
        camera = frame.camera
        with torch.no_grad():
            result = renderer.render(snapshot.model, [camera], snapshot.sh_degree, snapshot.background, depth="both")
        viewmat = camera.viewmat.double().numpy()
        original = viewmat.copy()  # the same camera in the dataset's frame (x_norm = s x + t)
        original[:3, 3] = (viewmat[:3, :3] @ matrix[:3, 3] + viewmat[:3, 3]) / scale
        truth = depth_map(original, camera.K.double().numpy(), camera.width, camera.height).astype(np.float64)
        padded = np.pad(truth, 1, mode="edge")
        neighbours = np.stack([padded[1:-1, :-2], padded[1:-1, 2:], padded[:-2, 1:-1], padded[2:, 1:-1]])
        edge = ((neighbours == 0) | (np.abs(neighbours - truth) > 0.05 * truth)).any(0)
        covered = (truth > 0) & (result.alpha[0, ..., 0].numpy() >= 0.5)
        for kind, depth in (("expected", result.depth), ("median", result.median_depth)):
            error = depth[0, ..., 0].double().numpy() / scale - truth
            errors[kind]["all"].append(error[covered])
            errors[kind]["edge"].append(error[covered & edge])
            errors[kind]["inner"].append(error[covered & ~edge])
    out = {}
    for kind, parts in errors.items():
        values = {part: np.concatenate(chunks) for part, chunks in parts.items()}
        out[f"{kind}_bias"] = float(np.median(values["all"]))
        for part in ("all", "edge", "inner"):
            out[f"{kind}_abs_{part}"] = float(np.median(np.abs(values[part])))
        out["edge_pixels"] = int(len(values["edge"]))
        out["inner_pixels"] = int(len(values["inner"]))
    return out


def train(name: str, terms: List[str], out: Path, steps: int, extra: List[str]) -> Dict[str, float]:
    """Train the demo with the loss ``terms`` into ``out``; its results.json plus wall time."""
    shutil.rmtree(out, ignore_errors=True)  # this benchmark's own run folder
    loss = "loss.terms=[" + ", ".join([PHOTOMETRIC, *terms]) + "]"
    command = [sys.executable, "-m", "splattrain", "fit", "--config", str(REPO / "configs" / "demo.yaml"),
               f"output_dir={out}", f"name=bench_mesh_{name}", f"trainer.max_steps={steps}", loss, "--quiet", *extra]
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    results = json.loads((out / "results.json").read_text())
    return {"psnr": results["psnr"], "ssim": results["ssim"], "gaussians": results["num_gaussians"],
            "train_seconds": results["train_seconds"], "wall_seconds": time.perf_counter() - start}


def export(run: Path, depth: str, options: List[str]) -> Tuple[Path, float]:
    """Export ``run``'s mesh with ``depth``; (its path, the export's wall time)."""
    path = run / f"mesh_{depth}.ply"
    command = [sys.executable, "-m", "splattrain", "export", str(run), "--format", "mesh", "--out", str(path),
               "--world-frame", "original", "--depth", depth, *options]
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return path, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--out-dir", type=Path, default=REPO / "outputs" / "bench_mesh")
    parser.add_argument("--runs", default=",".join(RUNS), help=f"which settings ({', '.join(RUNS)})")
    parser.add_argument("--reuse", action="store_true", help="score the runs already in --out-dir, train none")
    parser.add_argument("--mesh-options", default="", help="more options for export --format mesh")
    parser.add_argument("overrides", nargs="*", help="config overrides for every run")
    args = parser.parse_args()
    scene = REPO / "data" / "demo"
    rows = {}
    for name in args.runs.split(","):
        run = args.out_dir / name
        trained = {} if args.reuse else train(name, RUNS[name], run, args.steps, args.overrides)
        if args.reuse:
            results = json.loads((run / "results.json").read_text())
            trained = {"psnr": results["psnr"], "ssim": results["ssim"], "gaussians": results["num_gaussians"],
                       "train_seconds": results["train_seconds"]}
        for depth in ("expected", "median"):
            path, seconds = export(run, depth, shlex.split(args.mesh_options))
            rows[f"{name}/{depth}"] = {**trained, **evaluate_mesh(path, scene), "export_seconds": seconds}
            row = rows[f"{name}/{depth}"]
            print(f"{name:10s} {depth:8s} PSNR {row['psnr']:.2f}  Chamfer {row['chamfer']:.4f} "
                  f"({100 * row['chamfer'] / row['extent']:.2f}% of extent)  accuracy {row['accuracy']:.4f}  "
                  f"completeness {row['completeness']:.4f}  F@1% {row['fscore']:.3f}  export {seconds:.1f} s",
                  flush=True)
        depth = depth_errors(run)
        rows[f"{name}/median"]["depth_errors"] = rows[f"{name}/expected"]["depth_errors"] = depth
        print(f"{name:10s} rendered depth vs exact, median |error| edge / inner pixels: expected "
              f"{depth['expected_abs_edge']:.4f} / {depth['expected_abs_inner']:.4f}, median "
              f"{depth['median_abs_edge']:.4f} / {depth['median_abs_inner']:.4f}; bias expected "
              f"{depth['expected_bias']:+.4f}, median {depth['median_bias']:+.4f}", flush=True)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    first = next(iter(rows.values()))
    print(f"\nextent {first['extent']:.4f} (tau {first['tau']:.4f}), {first['true_points']:,} true points\n")
    print("| setting | depth | PSNR | Chamfer | % of extent | accuracy | completeness | precision | recall | "
          "F-score@1% | triangles | train s | export s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key, row in rows.items():
        name, depth = key.split("/")
        print(f"| {name} | {depth} | {row['psnr']:.2f} | {row['chamfer']:.4f} | {100 * row['chamfer'] / row['extent']:.2f} "
              f"| {row['accuracy']:.4f} | {row['completeness']:.4f} | {row['precision']:.3f} | {row['recall']:.3f} "
              f"| {row['fscore']:.3f} | {row['triangles']:,} | {row['train_seconds']:.1f} | {row['export_seconds']:.1f} |")


if __name__ == "__main__":
    main()
