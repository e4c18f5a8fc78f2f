"""Writer base class, the group that fans out to several writers safely, and spec checks."""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import ConfigError, UserError
from ..registry import WRITERS, check_options


class Writer:
    """Sends scalars, images and the config somewhere (files, TensorBoard, a tracker).

    Subclasses get the run directory as ``run_dir`` plus the options of their config
    entry, and override what they support. Images are float32 in [0, 1] or uint8 arrays
    of shape [H, W, 3]. A writer whose package is optional names it in ``requires`` as
    ``(module, extra)`` and imports it with :meth:`load_requirement`.
    """

    #: ``(module, extra)``: an optional package this writer needs and the extra that installs it.
    requires: Optional[Tuple[str, str]] = None

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)

    @classmethod
    def load_requirement(cls) -> Any:
        """Import the module in ``requires`` (None when there is none).

        Raises a one-line ConfigError naming the extra to install when it is missing.
        """
        if cls.requires is None:
            return None
        module, extra = cls.requires
        try:
            return importlib.import_module(module)
        except ImportError as err:
            detail = (str(err).splitlines() or [type(err).__name__])[0]
            raise ConfigError(
                f"writer {cls.__name__} needs the '{module}' package ({detail}); "
                f"install it with: pip install 'splattrain[{extra}]'"
            ) from None

    def write_scalar(self, tag: str, value: float, step: int) -> None:
        """One scalar at ``step``."""

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        """Several scalars logged together at ``step`` (default: one write_scalar each)."""
        for tag, value in scalars.items():
            self.write_scalar(tag, value, step)

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        """One [H, W, 3] image at ``step``."""

    def write_histogram(self, tag: str, values: np.ndarray, step: int) -> None:
        """The distribution of ``values`` (a 1-D array) at ``step``."""

    def write_config(self, config: Dict[str, Any], text: str) -> None:
        """The resolved config, as a dict and as YAML text."""

    def write_views(self, views: List[Dict[str, Any]], step: int) -> None:
        """A validation's scores per view at ``step``, called once per validation after the mean
        scalars: each row is ``{"view": name, "psnr": ..., "ssim": ..., "lpips": ..., ...}`` (a
        metric that was not computed is None), in the order of the views."""

    def flush(self) -> None:
        """Push buffered data out."""

    def close(self) -> None:
        """Release files and connections."""


def check_writer_spec(spec: Mapping[str, Any], where: str = "writers[0]") -> type:
    """The writer class for ``{type, optional?, **options}`` (the entry at key path ``where``),
    after checking its options and, unless it is ``optional``, its package.

    Builds nothing, so it writes nothing; raises ConfigError like a real build would.
    """
    if "type" not in spec:
        raise ConfigError(f"{where}: every writer needs a 'type', got {dict(spec)!r}")
    cls = WRITERS.get(str(spec["type"]))
    options = {k: v for k, v in spec.items() if k not in ("type", "optional")}
    check_options(cls, options, f"writer {spec['type']!r}", where, extra={"run_dir": "."})
    if isinstance(cls, type) and issubclass(cls, Writer) and not spec.get("optional"):
        try:
            cls.load_requirement()
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
    return cls


def check_writer_sections(specs: Any, where: str = "writers") -> None:
    """Check every entry of a ``writers`` list (:func:`check_writer_spec`)."""
    for index, spec in enumerate(specs):
        check_writer_spec(spec, f"{where}[{index}]")


WRITERS.set_checker(check_writer_sections)


class WriterGroup:
    """Fans calls out to writers; a writer that raises is reported once and disabled."""

    def __init__(self, writers: List[Writer], warn: Optional[Callable[[str], None]] = None) -> None:
        self.writers = list(writers)
        self._warn = warn

    def __len__(self) -> int:
        return len(self.writers)

    def _call(self, method: str, *args: Any) -> None:
        for writer in list(self.writers):
            try:
                getattr(writer, method)(*args)
            except Exception as err:  # a writer must never stop training
                self.writers.remove(writer)
                if self._warn is not None:
                    self._warn(
                        f"writer {type(writer).__name__} failed in {method} "
                        f"({_describe(err, writer)}); it is disabled for the rest of the run"
                    )
                if method != "close":
                    with contextlib.suppress(Exception):  # best effort: it already failed once
                        writer.close()

    def write_scalars(self, scalars: Mapping[str, float], step: int) -> None:
        self._call("write_scalars", scalars, step)

    def write_image(self, tag: str, image: np.ndarray, step: int) -> None:
        self._call("write_image", tag, image, step)

    def write_histogram(self, tag: str, values: np.ndarray, step: int) -> None:
        self._call("write_histogram", tag, values, step)

    def write_config(self, config: Dict[str, Any], text: str) -> None:
        self._call("write_config", config, text)

    def write_views(self, views: List[Dict[str, Any]], step: int) -> None:
        self._call("write_views", views, step)

    def flush(self) -> None:
        self._call("flush")

    def close(self) -> None:
        self._call("close")


def _describe(error: Exception, writer: Writer) -> str:
    """The error in one line; a failed file operation names the file (the writer's own, when the
    error does not say which)."""
    if isinstance(error, OSError):
        from ..errors import describe_os_error

        if error.filename is None:
            where = getattr(writer, "path", None) or writer.run_dir
            error = OSError(error.errno, error.strerror or str(error), str(where))
        return describe_os_error(error)
    return f"{type(error).__name__}: {error}"


def build_writers(specs: List[Mapping[str, Any]], run_dir: Path, warn: Callable[[str], None]) -> WriterGroup:
    """The writers of a ``writers`` list, started in ``run_dir``. One that cannot start stops the run
    with a ConfigError naming its entry, unless the entry says ``optional: true``: then it is
    skipped with a warning."""
    writers = []
    for index, spec in enumerate(specs):
        spec, where = dict(spec), f"writers[{index}]"
        optional = bool(spec.pop("optional", False))
        try:
            writers.append(WRITERS.build(spec, where=where, run_dir=run_dir))
        except Exception as err:
            detail = str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}"
            if not optional:
                raise ConfigError(f"{where}: writer {spec.get('type')!r} could not start ({detail}); "
                                  "mark it optional: true to train without it") from None
            warn(f"{where}: optional writer {spec.get('type')!r} could not start ({detail}); "
                 "training goes on without it")
    return WriterGroup(writers, warn=warn)
