"""The ``splattrain`` command line."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any, List, NoReturn, Optional

from .errors import UserError, describe_os_error

EXIT_USER_ERROR = 2
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

#: Busy-wait iterations of an idle OpenMP thread before it sleeps (libgomp's default is 300,000:
#: about a millisecond of spinning between two parallel loops). Spinning wins nothing on a quiet
#: machine at this setting and, when other processes want the cores (a browser showing the viewer,
#: other ranks, another job), it keeps the cores from them: training then slowed 2-3x on the 2-core
#: machine (docs/benchmarks.md, OpenMP threads on a busy machine). A value in the environment wins.
GOMP_SPINCOUNT = "10000"


#: ``splattrain list`` subjects and the registry attribute each lists.
_REGISTRIES = {"hooks": "HOOKS", "writers": "WRITERS", "datasets": "DATASETS", "renderers": "RENDERERS",
               "losses": "LOSSES", "strategies": "STRATEGIES", "trainers": "TRAINERS",
               "appearance": "APPEARANCE", "pose_opt": "POSE_OPT"}


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line (``error: ...``, exit code 2) like every other."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def _plugin_options(parser: argparse.ArgumentParser) -> None:
    """--import / --trust-config: how a command on a run registers the run's own plugins."""
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="PATH_OR_MODULE",
                        help="import a module (a .py path or a dotted name) that registers the run's plugins; repeatable")
    parser.add_argument("--trust-config", action="store_true",
                        help="import what the run's config.yaml names in imports: (runs that code)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="splattrain", description="Train 3D Gaussian Splatting scenes.")
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("fit", help="train a scene from a config file")
    fit.add_argument("--config", required=True, help="YAML config file (see configs/)")
    fit.add_argument("--resume", nargs="?", const="latest", default=None, metavar="PATH",
                     help="continue from a checkpoint (default: ckpt/last.pt in the run directory)")
    fit.add_argument("--overwrite", action="store_true",
                     help="start afresh in a run directory that holds checkpoints, moving the old run aside")
    fit.add_argument("--nproc", type=int, default=None, metavar="N",
                     help="train on N processes on this machine (torchrun's launcher on 127.0.0.1)")
    fit.add_argument("--dry-run", action="store_true",
                     help="build everything, check the writers, print the hooks, writers and config, exit")
    loudness = fit.add_mutually_exclusive_group()
    loudness.add_argument("--quiet", action="store_true", help="show only warnings and errors (log.txt gets everything)")
    loudness.add_argument("--verbose", action="store_true", help="also show debug lines and the hook table")
    fit.add_argument("--viewer", nargs="?", const="8080", default=None, metavar="PORT",
                     help="watch and steer training in the browser at http://127.0.0.1:PORT/ (default 8080)")
    fit.add_argument("overrides", nargs="*", metavar="dotted.key=value", help="config overrides")
    target_help = "a run directory (its newest checkpoint) or a checkpoint file"
    ev = sub.add_parser("eval", help="score a trained scene on its test views")
    ev.add_argument("target", metavar="RUN_DIR|CKPT", help=target_help)
    ev.add_argument("--split", choices=["test", "train"], default="test")
    ev.add_argument("--out", help="output folder (default RUN_DIR/eval/step_XXXXXX)")
    ev.add_argument("--save-renders", action="store_true", help="also write the rendered views as PNGs")
    ev.add_argument("--device", default="auto")
    ev.add_argument("--align-poses", type=int, default=None, metavar="N",
                    help="also score each view after N steps fitting its pose to the scene (aligned_psnr; "
                         "metrics.align_poses)")
    _plugin_options(ev)
    rd = sub.add_parser("render", help="render frames and an animation of a trained scene")
    rd.add_argument("target", metavar="RUN_DIR|CKPT", help=target_help)
    rd.add_argument("--path", choices=["test", "orbit"], default="test", help="test cameras or an orbit")
    rd.add_argument("--frames", type=int, default=60, help="frames in an orbit")
    rd.add_argument("--fps", type=int, default=15)
    rd.add_argument("--out", help="output folder (default RUN_DIR/renders/<path>_step_XXXXXX)")
    rd.add_argument("--depth", default="median",
                    help="depth maps written to OUT/depth/: median (default), expected or none")
    rd.add_argument("--device", default="auto")
    _plugin_options(rd)
    ex = sub.add_parser("export", help="write a trained scene as .ply, compressed .ply, .spz, .splat or a mesh")
    ex.add_argument("target", metavar="RUN_DIR|CKPT", help=target_help)
    ex.add_argument("--format", choices=["ply", "splat", "spz", "ply-compressed", "mesh"], default="ply",
                    help="mesh: a coloured triangle mesh fused from rendered depth (needs splattrain[mesh])")
    ex.add_argument("--sh-degree", type=int, default=None, help="keep SH up to this degree (default: all)")
    ex.add_argument("--out", help="output file (default RUN_DIR/export/step_XXXXXX.<format>; a mesh: "
                                  "step_XXXXXX_mesh.ply, or .obj)")
    ex.add_argument("--world-frame", choices=["normalized", "original"], default=None,
                    help="'original' undoes the scene normalisation applied at load (default: export.world_frame)")
    _add_mesh_options(ex)
    _plugin_options(ex)
    sc = sub.add_parser("schedule", help="print (or plot) the learning rates and SH degree a config will use")
    sc.add_argument("--config", required=True, help="YAML config file (see configs/)")
    sc.add_argument("--out", help="also plot every curve to this PNG file")
    sc.add_argument("overrides", nargs="*", metavar="dotted.key=value", help="config overrides")
    vw = sub.add_parser("view", help="look at a trained scene, checkpoint, 3DGS PLY or mesh PLY in the browser")
    vw.add_argument("target", metavar="RUN_DIR|CKPT|PLY", help="a run directory, a checkpoint, a 3DGS .ply file "
                                                               "or a mesh .ply (export --format mesh)")
    vw.add_argument("--port", type=int, default=8080)
    vw.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    vw.add_argument("--allow-origin", action="append", default=None, metavar="URL",
                    help="also accept connections from pages at this origin, http(s)://host[:port] ('*': any)")
    vw.add_argument("--background", default=None, metavar="R,G,B",
                    help="background colour in [0, 1] (default: the run's, white for a PLY)")
    vw.add_argument("--out", help="folder for saved PNG views (default RUN_DIR/viewer, or beside the PLY)")
    vw.add_argument("--mesh", default=None, metavar="PLY", help="also show this mesh PLY (from export --format mesh)")
    vw.add_argument("--device", default="auto")
    _plugin_options(vw)
    _add_process(sub)
    dw = sub.add_parser("download-weights", help="fetch the LPIPS weight files (SHA-256 checked) for machines "
                                                 "without network at training time")
    dw.add_argument("what", choices=["lpips"])
    dw.add_argument("--net", choices=["alex", "vgg"], default="alex", help="the LPIPS network (metrics.lpips_net)")
    dw.add_argument("--dir", dest="folder", metavar="DIR",
                    help="put the files in this folder (for metrics.lpips_weights) instead of torch's hub cache")
    lst = sub.add_parser("list", help="list registered hooks, writers, datasets, renderers, losses, strategies, trainers")
    lst.add_argument("what", choices=list(_REGISTRIES))
    lst.add_argument("--config", help="also import the modules this config names in imports:")
    return parser


def _add_mesh_options(parser: Any) -> None:
    mesh = parser.add_argument_group("mesh options (--format mesh; sizes in the units of the written frame)")
    mesh.add_argument("--depth", default="median", help="median (on the surface) or expected depth (default median)")
    mesh.add_argument("--voxel-size", type=float, default=None,
                      help="TSDF voxel edge (default: the extent the training cameras see / 256)")
    mesh.add_argument("--trunc", type=float, default=None, help="TSDF truncation distance (default: 4 voxels)")
    mesh.add_argument("--max-depth", type=float, default=None, help="fuse no depth beyond this (default: all)")
    mesh.add_argument("--components", type=int, default=50,
                      help="keep this many largest connected pieces, 0 all (default 50)")
    mesh.add_argument("--min-views", type=float, default=3.0,
                      help="views that must see a voxel for it to take part in the surface (default 3)")


def _add_process(sub: Any) -> None:
    from .process.options import add_arguments

    add_arguments(sub.add_parser("process", help="photos or a video to a COLMAP scene that fit trains"))


def escape(text: str) -> str:
    """Rich markup escaped (rich is imported only when something is printed)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _fit(args: argparse.Namespace) -> int:
    from .commands.fit import fit

    return fit(args)


def _eval(args: argparse.Namespace) -> int:
    from .commands.evaluate import evaluate
    from .console import Console

    evaluate(args.target, Console(), split=args.split, out=args.out, save_renders=args.save_renders, device=args.device,
             imports=args.imports, trust_config=args.trust_config, align_poses=args.align_poses)
    return 0


def _render(args: argparse.Namespace) -> int:
    from .commands.render import render
    from .console import Console

    for option, value in (("--frames", args.frames), ("--fps", args.fps)):
        if not 1 <= value <= 100_000:
            raise UserError(f"render {option} must be between 1 and 100000, got {value}")
    render(args.target, Console(), path=args.path, out=args.out, frames=args.frames, fps=args.fps, device=args.device,
           imports=args.imports, trust_config=args.trust_config, depth=args.depth)
    return 0


def _export(args: argparse.Namespace) -> int:
    from .commands.export import export
    from .commands.export_mesh import MeshOptions
    from .console import Console

    mesh = MeshOptions(depth=args.depth, voxel_size=args.voxel_size, trunc=args.trunc, max_depth=args.max_depth,
                       components=args.components, min_views=args.min_views)
    if args.format != "mesh" and mesh != MeshOptions():
        changed = next(name for name in vars(mesh) if getattr(mesh, name) != getattr(MeshOptions(), name))
        raise UserError(f"--{changed.replace('_', '-')} applies to --format mesh only")
    export(args.target, Console(), fmt=args.format, out=args.out, world_frame=args.world_frame,
           sh_degree=args.sh_degree, imports=args.imports, trust_config=args.trust_config, mesh=mesh)
    return 0


def _view(args: argparse.Namespace) -> int:
    from .commands.view import view
    from .console import Console

    view(args.target, Console(), port=args.port, host=args.host, background=args.background, out=args.out,
         device=args.device, allow_origins=args.allow_origin, imports=args.imports,
         trust_config=args.trust_config, mesh=args.mesh)
    return 0


def _process(args: argparse.Namespace) -> int:
    from .commands.process import from_arguments, process
    from .console import Console

    process(args.input, args.output, Console(), *from_arguments(args))
    return 0


def _download_weights(args: argparse.Namespace) -> int:
    from .commands.download_weights import download_weights
    from .console import Console

    download_weights(Console(), args.what, net=args.net, folder=args.folder)
    return 0


def _schedule(args: argparse.Namespace) -> int:
    from .commands.schedule import show_schedule
    from .console import Console
    from .engine import load_config

    show_schedule(load_config(Path(args.config), args.overrides), Console(), out=args.out)
    return 0


def _list(args: argparse.Namespace) -> int:
    from rich.console import Console as RichConsole
    from rich.markup import escape
    from rich.table import Table

    from . import registry

    if args.config:  # the config's imports may register more
        from .engine import load_config

        load_config(Path(args.config))
    described = getattr(registry, _REGISTRIES[args.what]).describe()  # its built-ins imported on first use
    table = Table(title=f"registered {args.what}", title_justify="left")
    table.add_column("name")
    table.add_column("description")
    for name, doc in described.items():
        table.add_row(name, escape(doc))
    RichConsole().print(table)
    return 0


def _one_line(message: str) -> str:
    """``message`` on one line (a library's multi-line text is joined)."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def _rank_prefix() -> str:
    """``[rank N] `` on torchrun ranks other than 0 (their errors still reach the console)."""
    rank = os.environ.get("RANK", "0")
    return f"[rank {rank}] " if rank not in ("", "0") else ""


def _parse(argv: Optional[List[str]]) -> argparse.Namespace:
    """The command line; ``dotted.key=value`` overrides may also come after options
    (``fit --config X --resume a.b=1 c.d=2``), wherever argparse's positionals stop."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        if not hasattr(args, "overrides") or any(arg.startswith("-") or "=" not in arg for arg in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides.extend(extra)
    args.argv = argv
    return args


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the process exit code.

    SIGINT and SIGTERM are recorded and acted on at safe points (:mod:`splattrain.interrupts`):
    exit code 130 / 143 after the work in progress was left in a resumable state.
    """
    from . import interrupts

    if argv is None:  # a process of its own: before torch loads the OpenMP runtime, which reads it once
        os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)
    interrupts.defer(watchdog=argv is None)
    try:
        return _run_command(argv)
    finally:
        if argv is None:  # a process of its own: nothing may interrupt its exit any more
            interrupts.ignore()
        else:
            interrupts.restore()


#: Commands whose work needs PyTorch.
_TORCH_COMMANDS = ("fit", "eval", "render", "export", "view")


def _import_torch_out_of_the_collectors_reach() -> None:
    """Import PyTorch and move what exists then out of the garbage collector's reach.

    PyTorch's import leaves about 166,000 objects that live as long as the process. The
    collections that later imports and the build set off would walk them all again: a full one
    takes about 0.15 s, a third of what a short ``fit`` costs beyond ``import torch``
    (docs/benchmarks.md, start-up). Frozen (:func:`gc.freeze`), they are never walked again.
    """
    import gc

    import torch  # noqa: F401

    gc.freeze()


def _run_command(argv: Optional[List[str]]) -> int:
    from .interrupts import check

    try:
        args = _parse(argv)
        if argv is None:  # a process of its own, which ends after the command: no collection of its objects at exit
            import atexit
            import gc

            atexit.register(gc.freeze)
            if args.command in _TORCH_COMMANDS:
                _import_torch_out_of_the_collectors_reach()
        commands = {"fit": _fit, "eval": _eval, "render": _render, "export": _export, "schedule": _schedule,
                    "view": _view, "list": _list, "process": _process, "download-weights": _download_weights}
        code = commands[args.command](args)
        check()  # a signal that arrived during the command's last stretch still stops it
        return code
    except UserError as err:
        print(f"{_rank_prefix()}error: {_one_line(str(err))}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as err:  # a path the user gave cannot be written (full disk, read-only, in the way)
        print(f"{_rank_prefix()}error: {describe_os_error(err)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as err:
        signum = getattr(err, "signum", signal.SIGINT)
        print(f"stopped by {signal.Signals(signum).name}", file=sys.stderr)
        return EXIT_SIGTERM if signum == signal.SIGTERM else EXIT_SIGINT


if __name__ == "__main__":
    sys.exit(main())
