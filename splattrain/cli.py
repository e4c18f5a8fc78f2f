"""The ``splattrain`` command line."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import List, Optional

from .errors import UserError

EXIT_USER_ERROR = 2
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="splattrain", description="Train 3D Gaussian Splatting scenes.")
    sub = parser.add_subparsers(dest="command", required=True)
    fit = sub.add_parser("fit", help="train a scene from a config file")
    fit.add_argument("--config", required=True, help="YAML config file (see configs/)")
    fit.add_argument("--resume", nargs="?", const="latest", default=None, metavar="PATH",
                     help="continue from a checkpoint (default: ckpt/last.pt in the run directory)")
    fit.add_argument("--dry-run", action="store_true", help="build everything, print the hooks and config, exit")
    fit.add_argument("--quiet", action="store_true", help="show only warnings and errors")
    fit.add_argument("--verbose", action="store_true", help="show debug lines too")
    fit.add_argument("overrides", nargs="*", metavar="dotted.key=value", help="config overrides")
    lst = sub.add_parser("list", help="list registered hooks, writers, datasets or renderers")
    lst.add_argument("what", choices=["hooks", "writers", "datasets", "renderers"])
    return parser


def _resume_path(arg: Optional[str], run_dir: Path) -> Optional[Path]:
    if arg is None:
        return None
    path = run_dir / "ckpt" / "last.pt" if arg == "latest" else Path(arg)
    if not path.is_file():
        raise UserError(f"--resume: checkpoint '{path}' not found")
    return path


def _fit(args: argparse.Namespace) -> int:
    from .config import config_to_yaml, load_config
    from .console import Console
    from .engine import DefaultTrainer

    console = Console(quiet=args.quiet, verbose=args.verbose)
    config_path = Path(args.config)
    cfg = load_config(config_path, args.overrides)
    trainer = DefaultTrainer(cfg, console=console, config_dir=config_path.parent)
    if args.dry_run:
        console.table("hooks", ["point", "hooks (priority)"], [[p, ", ".join(n)] for p, n in trainer.hooks.table()])
        console.print(config_to_yaml(cfg))
        return 0
    resume = _resume_path(args.resume, trainer.run_dir)
    results = trainer.train(resume=resume)
    shown = "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in results.items() if k != "per_view")
    console.print(f"done: {shown}  ->  {trainer.run_dir / 'results.json'}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from rich.console import Console as RichConsole
    from rich.table import Table

    import splattrain.data.loading  # noqa: F401  (registers datasets)
    import splattrain.render.splat_renderers  # noqa: F401  (registers renderers)

    from . import registry

    reg = {"hooks": registry.HOOKS, "writers": registry.WRITERS, "datasets": registry.DATASETS,
           "renderers": registry.RENDERERS}[args.what]
    table = Table(title=f"registered {args.what}", title_justify="left")
    table.add_column("name")
    table.add_column("description")
    for name, doc in reg.describe().items():
        table.add_row(name, doc)
    RichConsole().print(table)
    return 0


class _Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an exception so cleanup runs as for Ctrl-C."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the process exit code."""
    args = _parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return _fit(args) if args.command == "fit" else _list(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt as err:
        terminated = isinstance(err, _Terminated)
        print("terminated" if terminated else "interrupted", file=sys.stderr)
        return EXIT_SIGTERM if terminated else EXIT_SIGINT
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
