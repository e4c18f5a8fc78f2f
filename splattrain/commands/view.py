"""``splattrain view``: a finished run, a checkpoint, any standard 3DGS PLY or a mesh PLY in the
browser; ``--mesh`` shows a mesh beside a scene."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np
import torch

from .. import interrupts
from ..console import Console
from ..data.types import Frame
from ..engine.setup import resolve_device
from ..errors import UserError
from ..io.gaussians_file import read_gaussians_file
from ..mesh.files import MeshArrays, is_mesh_ply, read_mesh_ply
from ..model.gaussians import GaussianModel
from ..render import Renderer, build_renderer
from ..viewer.camera import ViewPose, matrix_to_quat


@dataclass
class ViewedScene:
    """Everything the page needs: Gaussians, how to render them, the cameras to draw, a mesh to
    show (a mesh PLY alone has no Gaussians: ``model`` and ``renderer`` are None)."""

    name: str
    model: Optional[GaussianModel]
    sh_degree: int
    renderer: Optional[Renderer]
    background: torch.Tensor
    png_dir: Path
    step: Optional[int] = None
    train: List[Frame] = field(default_factory=list)
    test: List[Frame] = field(default_factory=list)
    scene_scale: float = 1.0
    mesh: Optional[MeshArrays] = None


def parse_background(text: str) -> List[float]:
    """'R,G,B' with values in [0, 1] (or 'white' / 'black')."""
    named = {"white": [1.0, 1.0, 1.0], "black": [0.0, 0.0, 0.0]}
    if text in named:
        return named[text]
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 3 or not all(0.0 <= v <= 1.0 for v in values):
        raise UserError(f"--background {text!r}: give R,G,B in [0, 1], white or black")
    return values


def load_viewed_scene(target: str | Path, console: Console, device: str = "auto",
                      background: Optional[str] = None, out: Optional[str] = None,
                      imports: Sequence[str] = (), trust_config: bool = False) -> ViewedScene:
    """A scene file (.ply, compressed .ply, .spz, .splat: by its suffix; a .ply with faces is a
    mesh, shown alone), else a run directory or checkpoint with its train and test cameras. A run whose renderer or dataset reader came from
    ``imports:`` needs ``imports`` or ``trust_config`` (:class:`RunPluginError` otherwise); a run
    whose scene cannot be read any more is shown without its cameras."""
    path = Path(target)
    resolved = resolve_device(device)
    if path.suffix.lower() in (".ply", ".spz", ".splat"):
        if not path.is_file():
            raise UserError(f"'{path}' is not a file")
        if path.suffix.lower() == ".ply" and is_mesh_ply(path):
            return ViewedScene(path.stem, None, 0, None, torch.tensor(parse_background(background or "white")),
                               Path(out) if out else path.parent, mesh=read_mesh_ply(path, console.warning))
        params, degree = read_gaussians_file(path)
        colour = parse_background(background or "white")
        renderer = build_renderer({"type": "auto"}, resolved, log=console.debug, warn=console.warning)
        png_dir = Path(out) if out else path.parent / f"{path.stem}_views"
        return ViewedScene(path.stem, GaussianModel(params, degree).to(resolved), degree, renderer,
                           torch.tensor(colour, device=resolved), png_dir)
    from ..data.pipeline import camera_scene_scale
    from .snapshot import RunPluginError, load_snapshot

    snapshot = load_snapshot(path, device, imports, trust_config)
    colour = parse_background(background) if background else list(snapshot.cfg.data.background)
    gone: Optional[UserError] = None
    try:
        data = snapshot.scene()
    except RunPluginError:  # the run's own reader is needed, never another one
        raise
    except UserError as err:  # the scene moved or is gone: the Gaussians are shown alone
        data, gone = None, err
    scene = ViewedScene(str(snapshot.cfg.name), snapshot.model, snapshot.sh_degree,
                        snapshot.renderer(log=console.debug, warn=console.warning, scene=data),
                        torch.tensor(colour, dtype=torch.float32, device=snapshot.device),
                        Path(out) if out else snapshot.run_dir / "viewer", step=snapshot.step)
    if data is None:
        console.warning(f"the run's cameras are not shown: {gone}")
        return scene
    scene.train, scene.test = list(data.train), list(data.test)
    scene.scene_scale = camera_scene_scale([f.camera for f in data.train or data.test])
    return scene


def points_overview_pose(means: torch.Tensor | np.ndarray, up: np.ndarray = np.array([0.0, 0.0, 1.0]), fov: float = 0.9) -> ViewPose:
    """A camera looking at the Gaussians' median from outside most of them (up is ``up``); Gaussians
    whose centre is not finite are left out (none left: the origin, from a distance of 2.5)."""
    points = np.asarray(means.detach().cpu().double() if isinstance(means, torch.Tensor) else means,
                        dtype=np.float64).reshape(-1, 3)
    points = points[np.isfinite(points).all(axis=1)]
    center = np.median(points, axis=0) if len(points) else np.zeros(3)
    radius = float(np.percentile(np.linalg.norm(points - center, axis=1), 90)) if len(points) else 1.0
    direction = np.array([1.0, -1.0, 0.6])
    position = center + direction / np.linalg.norm(direction) * max(radius, 1e-3) * 2.5
    forward = (center - position) / np.linalg.norm(center - position)
    right = np.cross(forward, up)
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    px, py, pz = (float(v) for v in position)
    return ViewPose(matrix_to_quat(np.stack([right, down, forward], axis=1)), (px, py, pz), fov, 1.0)


def view(target: str | Path, console: Console, port: int = 8080, host: str = "127.0.0.1",
         background: Optional[str] = None, out: Optional[str] = None, device: str = "auto",
         allow_origins: Optional[List[str]] = None, imports: Sequence[str] = (),
         trust_config: bool = False, mesh: Optional[str] = None) -> None:
    """Serve the page until Ctrl-C; pages from ``allow_origins`` may connect besides the viewer's own.
    ``mesh``: a mesh PLY shown beside the scene (a checkbox hides it)."""
    from ..viewer.guard import check_allow_origins
    from ..viewer.launch import open_viewer
    from ..viewer.server import check_port_free, wait_for
    from ..viewer.session import scene_markdown

    origins = check_allow_origins(allow_origins, "--allow-origin")
    check_port_free(host, port)
    scene = load_viewed_scene(target, console, device, background, out, imports, trust_config)
    if mesh is not None:
        if scene.mesh is not None:
            raise UserError(f"--mesh {mesh}: {target} is a mesh already")
        scene.mesh = read_mesh_ply(mesh, console.warning)
    if scene.model is not None:
        shown = f"{scene.model.num_gaussians:,} Gaussians"
    else:
        shown = f"{len(scene.mesh.vertices):,} vertices, {len(scene.mesh.faces):,} triangles"  # type: ignore[union-attr]
    overview = None
    if not (scene.train or scene.test):
        points = scene.model.params["means"] if scene.model is not None else scene.mesh.vertices  # type: ignore
        overview = (points_overview_pose(points), np.array([0.0, 0.0, 1.0]))
    viewer = open_viewer(console, scene.name, scene.renderer, scene.background, scene.png_dir, host, port,
                         allow_origins=origins, train=scene.train, test=scene.test, scene_scale=scene.scene_scale,
                         note=f"{scene.name}, {shown}; Ctrl-C stops; ", initial_view=overview)
    try:
        if scene.mesh is not None:
            viewer.server.add_mesh(scene.mesh.vertices, scene.mesh.faces, scene.mesh.colors)
        if scene.model is not None:
            viewer.server.set_stats(scene_markdown(scene.name, scene.model.num_gaussians, scene.step))
        else:
            viewer.server.set_stats(f"**{scene.name}**  \n{shown}")
        while True:
            interrupts.check()
            if viewer.service is not None:
                viewer.service.serve_waiting(scene.model, scene.sh_degree)  # type: ignore[arg-type]
            wait_for(viewer.server.wake, 0.1)
    finally:
        viewer.close()
