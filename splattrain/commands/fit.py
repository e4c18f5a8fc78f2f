"""``splattrain fit``: train a scene from a config, on one process or several."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from pathlib import Path
from typing import Any, Iterator, List

from rich.markup import escape

from ..config import config_to_yaml
from ..console import Console
from ..engine import load_run_config
from ..errors import ConfigError, UserError
from ..registry import TRAINERS
from ..writers import check_writer_spec


def fit(args: argparse.Namespace) -> int:
    """``splattrain fit``: train the config's scene (``--nproc N``: on N local processes;
    ``--dry-run``: build everything, print the hooks, writers, scaled settings and config)."""
    if args.nproc is not None:
        from ..distributed.launch import launch_local

        return launch_local(args.nproc, _without_nproc(sys.argv[2:] if args.argv is None else args.argv[1:]))
    console = Console(quiet=args.quiet, verbose=args.verbose)
    config_path = Path(args.config)
    if args.resume not in (None, "latest") and "=" in args.resume and not Path(args.resume).exists():
        args.overrides.insert(0, args.resume)  # `--resume key=value`: an override, not a path
        args.resume = "latest"
    if args.viewer is not None and not args.viewer.isdigit():
        if "=" not in args.viewer:
            raise UserError(f"--viewer {args.viewer!r}: give a port number (or nothing for 8080)")
        args.overrides.insert(0, args.viewer)  # `--viewer key=value`: an override, not a port
        args.viewer = "8080"
    viewer = [] if args.viewer is None else [f"default_hooks.viewer.port={args.viewer}"]
    run_config = load_run_config(config_path, [*args.overrides, *viewer])
    cfg = run_config.cfg
    resume = shlex.join(["splattrain", "fit", "--config", str(config_path), *args.overrides, "--resume"])
    with _naming_config(config_path):  # what fails while plugins are built names the config too
        trainer = TRAINERS.get(cfg.trainer.type)(cfg, console=console, config_dir=config_path.parent,
                                                 resume_command=resume, scaled=run_config.scaled)
    if args.dry_run:
        if not trainer.is_main:
            return 0
        console.table("hooks", ["point", "hooks (priority)"], [[p, ", ".join(n)] for p, n in trainer.hooks.table()])
        console.table("writers", ["type", "class", "options"], _writer_rows(cfg.writers))
        for line in run_config.scaled:
            console.info(f"scaled: {line}")
        console.print(escape(config_to_yaml(cfg)))
        return 0
    if args.overwrite and args.resume is not None:
        raise UserError("--overwrite starts a new run; it cannot be combined with --resume")
    if args.argv is None:  # a process of its own: the objects made so far live to the end, so the
        import gc          # garbage collector need not walk them again during training

        gc.freeze()
    with _naming_config(config_path):
        results = trainer.train(resume=args.resume, overwrite=args.overwrite)
    if not trainer.is_main:
        return 0  # rank 0 reports
    shown = "  ".join(f"{k} {_shown(v)}" for k, v in results.items() if k != "per_view")
    console.open_log(trainer.run_dir / "log.txt")  # the trainer closed it; the last line belongs there too
    console.info(f"done: {shown}  ->  {trainer.run_dir / 'results.json'}")
    console.close()
    return 0


def _shown(value: Any) -> str:
    """A value of results.json for the ``done:`` line: floats to 4 places, ``null`` for None,
    a mapping as ``(key value, ...)``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4f}"
    if isinstance(value, dict):
        return "(" + ", ".join(f"{k} {_shown(v)}" for k, v in value.items()) + ")"
    return str(value)


@contextlib.contextmanager
def _naming_config(path: Path) -> Iterator[None]:
    """A ConfigError raised inside names the config file first, as load_config's errors do."""
    try:
        yield
    except ConfigError as err:
        if str(err).startswith(str(path)):
            raise
        raise ConfigError(f"{path}: {err}") from None


def _without_nproc(argv: List[str]) -> List[str]:
    """``fit``'s arguments without ``--nproc N`` / ``--nproc=N`` (each rank runs a plain fit)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            out.append(arg)
    return out


def _writer_rows(specs: List[Any]) -> List[List[str]]:
    """One row per writer entry, each checked (type, options, optional package) without building it."""
    rows = []
    for index, spec in enumerate(specs):
        cls = check_writer_spec(spec, f"writers[{index}]")
        options = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "type")
        rows.append([escape(str(spec["type"])), cls.__name__, escape(options)])
    return rows
