"""Pictures of an exported mesh beside its splat, headless on the CPU.

    python benchmarks/mesh_pictures.py RUN_DIR MESH.ply OUT.png [--views 0,3] [--split test] [--size 256]
                                       [--world-frame normalized|original]

For each chosen view of the run's ``--split`` cameras: the splat rendered by splattrain's own
renderer, and the mesh ray-cast with Open3D's ``RaycastingScene`` (Embree, CPU) from the same
camera, its vertex colours interpolated and shaded by the facet normal (a head light), side by
side; the rows are stacked into one PNG. ``--world-frame`` says which frame the mesh was written
in (``export --world-frame``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from splattrain.cameras import Camera  # noqa: E402
from splattrain.commands.snapshot import load_snapshot  # noqa: E402
from splattrain.io.png import save_png, to_uint8  # noqa: E402
from splattrain.mesh import MeshArrays, import_open3d, read_mesh_ply  # noqa: E402


def raycast(mesh: MeshArrays, camera: Camera, background: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3]: ``mesh`` seen from ``camera`` (pixel-centre rays), shaded by a head light."""
    o3d = import_open3d()
    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(o3d.core.Tensor(mesh.vertices.astype(np.float32)), o3d.core.Tensor(mesh.faces.astype(np.uint32)))
    K, viewmat = camera.K.double().numpy(), camera.viewmat.double().numpy()
    u, v = np.meshgrid(np.arange(camera.width) + 0.5, np.arange(camera.height) + 0.5)
    dirs = np.stack([(u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1], np.ones_like(u)], axis=-1) @ viewmat[:3, :3]
    dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
    origin = -viewmat[:3, :3].T @ viewmat[:3, 3]
    rays = np.concatenate([np.broadcast_to(origin, dirs.shape), dirs], axis=-1).astype(np.float32)
    hit = scene.cast_rays(o3d.core.Tensor(rays))
    ids = hit["primitive_ids"].numpy().astype(np.int64)
    found = np.isfinite(hit["t_hit"].numpy())
    image = np.broadcast_to(background, dirs.shape).copy()
    if found.any():
        uv = hit["primitive_uvs"].numpy()[found]
        corners = mesh.faces[ids[found]]
        colours = mesh.colors.astype(np.float64)[corners] / 255.0  # [M, 3 corners, 3]
        colour = (1 - uv[:, :1] - uv[:, 1:]) * colours[:, 0] + uv[:, :1] * colours[:, 1] + uv[:, 1:] * colours[:, 2]
        normals = hit["primitive_normals"].numpy()[found]
        light = np.abs((normals * dirs[found]).sum(-1, keepdims=True))
        image[found] = colour * (0.35 + 0.65 * light)
    return to_uint8(image)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("mesh", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--views", default="0")
    parser.add_argument("--split", default="test", choices=["test", "train"])
    parser.add_argument("--size", type=int, default=256, help="long side of each picture in pixels")
    parser.add_argument("--world-frame", default="original", choices=["normalized", "original"])
    args = parser.parse_args()
    snapshot = load_snapshot(args.run, "cpu")
    scene = snapshot.scene()
    frames = scene.test if args.split == "test" else scene.train
    mesh = read_mesh_ply(args.mesh)
    transform = snapshot.checkpoint.get("world_transform")
    if args.world_frame == "original" and transform is not None:  # into the frame the splat is rendered in
        matrix = torch.as_tensor(transform, dtype=torch.float64).numpy()
        mesh = mesh.transformed(float(np.cbrt(np.linalg.det(matrix[:3, :3]))), matrix[:3, 3])
    renderer = snapshot.renderer()
    background = snapshot.background.numpy().astype(np.float64)
    rows = []
    for index in (int(v) for v in args.views.split(",")):
        camera = frames[index].camera
        camera = camera.scaled(args.size / max(camera.width, camera.height))
        with torch.no_grad():
            splat = to_uint8(renderer.render(snapshot.model, [camera], snapshot.sh_degree, snapshot.background,
                                             depth=False).rgb[0])
        gap = np.full((camera.height, 4, 3), 255, np.uint8)
        rows.append(np.concatenate([splat, gap, raycast(mesh, camera, background)], axis=1))
    width = max(r.shape[1] for r in rows)
    picture = np.concatenate([np.pad(r, ((0, 4), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows])
    save_png(args.out, picture[:-4])
    print(f"wrote {args.out} ({picture.shape[1]} x {picture.shape[0] - 4})")


if __name__ == "__main__":
    main()
