"""Compile the C++ sources next to this file into a shared library on first use; load it with ctypes.

The library is plain C++17 with a C ABI (no Python or PyTorch headers), so it compiles in
seconds with any C++ compiler and does not depend on the torch version. Its parallel loops run
on threads of its own (``worker_pool.h``; how many: ``threads.loop_threads``). It is cached under
``$SPLATTRAIN_CACHE`` (default ``$XDG_CACHE_HOME/splattrain`` or ``~/.cache/splattrain``) in
``ext/``, named by a hash of the source, the flags and the platform, so later processes load
it without compiling. The compiler is ``$CXX``, else the first of c++, g++, clang++ on PATH.
``$SPLATTRAIN_ISA`` (``baseline``, ``avx2`` or ``avx512``) runs the vector kernels on that
instruction set instead of the widest this CPU has (to test each path on one machine).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Tuple

SOURCES = tuple(Path(__file__).with_name(name) for name in (
    "rasterize.cpp", "project.cpp", "ssim.cpp", "adam.cpp", "stats.cpp", "knn.cpp", "noise.cpp",
))
HEADERS = tuple(Path(__file__).with_name(name) for name in (
    "common.h", "worker_pool.h", "isa_variants.inc", "composite_tile.inc", "binning.inc", "project_lanes.inc", "sh_lanes.inc",
))
FLAGS = ("-std=c++17", "-O3", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd", "-fPIC", "-shared", "-pthread")
BUILD_TIMEOUT_S = 300
INSTRUCTION_SETS = ("baseline", "avx2", "avx512")
ISA_VARIABLE = "SPLATTRAIN_ISA"


class BuildError(RuntimeError):
    """The CPU rasterizer could not be compiled or loaded; the message says why."""


@dataclass
class Library:
    """The loaded rasterizer library.

    Attributes:
        handle: the ctypes handle, with argument types declared.
        path: the cached shared library.
        built: True when this process compiled it, False when it came from the cache.
    """

    handle: ctypes.CDLL
    path: Path
    built: bool

    @property
    def instruction_sets(self) -> Tuple[str, ...]:
        """The instruction sets the compositing kernels can run with on this CPU, narrowest
        first; the widest is used unless :meth:`use_instruction_set` picks another."""
        return INSTRUCTION_SETS[: self.handle.splat_widest_isa() + 1]

    def use_instruction_set(self, name: Optional[str]) -> None:
        """Run the vector kernels with ``name`` (one of :attr:`instruction_sets`), or, when None,
        with ``$SPLATTRAIN_ISA``'s or else the widest. ValueError for a set this CPU or build
        does not have."""
        name = name or os.environ.get(ISA_VARIABLE) or None
        if name is not None and name not in self.instruction_sets:
            raise ValueError(f"instruction set {name!r} is not available here; choose from {self.instruction_sets}")
        self.handle.splat_use_isa(-1 if name is None else INSTRUCTION_SETS.index(name))


_LOCK = threading.Lock()
_LOADED: Optional[Library] = None
_FAILED: Optional[BuildError] = None


def cache_dir() -> Path:
    """Where compiled libraries are kept."""
    root = os.environ.get("SPLATTRAIN_CACHE")
    if root:
        return Path(root) / "ext"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "splattrain" / "ext"


def library_path() -> Path:
    """The cache path of the library for this source, these flags and this platform."""
    digest = hashlib.sha256()
    for path in (*SOURCES, *HEADERS):
        digest.update(path.read_bytes())
    digest.update(" ".join(FLAGS).encode())
    digest.update(f"{sys.platform}-{platform.machine()}".encode())
    suffix = ".dylib" if sys.platform == "darwin" else ".so"
    return cache_dir() / f"splat_cpu_{digest.hexdigest()[:16]}{suffix}"


def find_compiler() -> str:
    """``$CXX`` or the first C++ compiler on PATH; BuildError when there is none."""
    cxx = os.environ.get("CXX")
    if cxx:
        found = shutil.which(cxx)
        if found is None:
            raise BuildError(f"the C++ compiler named by CXX ({cxx!r}) was not found")
        return found
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found is not None:
            return found
    raise BuildError("no C++ compiler found (install g++ or clang++, or set CXX)")


def _run(command: List[str], cxx: str) -> subprocess.Popen:
    """Start a compiler process (output and errors captured together)."""
    try:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as error:
        raise BuildError(f"running {cxx} failed: {error}") from None


def _finish(process: subprocess.Popen, cxx: str) -> None:
    """Wait for a compiler process; BuildError with its last line when it fails."""
    try:
        output, _ = process.communicate(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise BuildError(f"{cxx} took longer than {BUILD_TIMEOUT_S} s") from None
    if process.returncode != 0:
        lines = (output or "").strip().splitlines()
        detail = lines[-1] if lines else f"exit code {process.returncode}"
        raise BuildError(f"{cxx} could not compile the CPU rasterizer: {detail}")


def _compile(cxx: str, target: Path) -> None:
    """Compile SOURCES with ``cxx`` (one compiler process per source, side by side) and link them
    to ``target`` atomically (concurrent builds each rename a whole file)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f"{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    objects = [scratch.with_name(f"{scratch.name}.{source.stem}.o") for source in SOURCES]
    compile_flags = [flag for flag in FLAGS if flag != "-shared"]
    try:
        processes = [_run([cxx, *compile_flags, "-c", str(source), "-o", str(obj)], cxx)
                     for source, obj in zip(SOURCES, objects)]
        errors = []
        for process in processes:
            try:
                _finish(process, cxx)
            except BuildError as error:
                errors.append(error)
        if errors:
            raise errors[0]
        _finish(_run([cxx, *FLAGS, *map(str, objects), "-o", str(scratch)], cxx), cxx)
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)
        for obj in objects:
            obj.unlink(missing_ok=True)


def _declare(handle: ctypes.CDLL) -> None:
    """Argument and result types of the exported functions."""
    ptr, i64, i32, f64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_double
    grid = [i32, i32, i32]  # tile_size, tiles_x, tiles_y
    scene = [ptr] * 6 + [i64, i64, i64, i32, i32] + grid + [i32, i32, ptr, ptr]  # ..., reach, backgrounds
    camera = [ptr] * 6 + [i64, i64, i32, i32, f64, f64, f64, i32, i32]
    sh = [ptr, ptr, ptr, i64, ptr, i64, i64, i32, i32]
    for suffix in ("f32", "f64"):
        for name, args in (
            ("project_forward", [*camera, *[ptr] * 5]),
            ("project_backward", [*camera, *[ptr] * 8]),
            ("sh_forward", [*sh, ptr]),
            ("sh_backward", [*sh, *[ptr] * 4]),
        ):
            function = getattr(handle, f"splat_{name}_{suffix}")
            function.argtypes, function.restype = args, None
        count = getattr(handle, f"splat_bin_count_{suffix}")
        count.argtypes, count.restype = [ptr] * 4 + [i64, i64, *grid, i32, i32, i32, ptr, ptr, ptr], i64
        fill = getattr(handle, f"splat_bin_fill_{suffix}")
        fill.argtypes, fill.restype = [ptr] * 4 + [i64, i64, *grid, i32, i32, i32, *[ptr] * 6], None
        forward = getattr(handle, f"splat_forward_{suffix}")
        forward.argtypes, forward.restype = [*scene, ptr, ptr, ptr, i32, ptr], None
        backward = getattr(handle, f"splat_backward_{suffix}")
        backward.argtypes, backward.restype = [*scene, *[ptr] * 10], None
        images = [ptr, ptr, i64, i32, i32, i32, i32]  # pred, target, N, H, W, C, threads
        ssim_forward = getattr(handle, f"splat_ssim_forward_{suffix}")
        ssim_forward.argtypes, ssim_forward.restype = [*images, ptr], f64
        ssim_backward = getattr(handle, f"splat_ssim_backward_{suffix}")
        ssim_backward.argtypes, ssim_backward.restype = [*images, ptr, f64, ptr], None
    accumulate = handle.splat_accumulate_grad2d_f32
    accumulate.argtypes, accumulate.restype = [ptr, ptr, i64, i64, ctypes.c_float, ctypes.c_float, ctypes.c_float,
                                               ptr, ptr, ptr], None
    noise = handle.splat_mcmc_noise_f32
    noise.argtypes, noise.restype = [ptr] * 5 + [i64, ctypes.c_float, i32], None
    adam = handle.splat_adam_step_f32
    adam.argtypes, adam.restype = [ptr] * 7 + [i32, ptr, i32], None
    handle.splat_knn_tree_build_f64.argtypes, handle.splat_knn_tree_build_f64.restype = [ptr, i64, ptr, ptr], None
    knn = handle.splat_knn_tree_mean_f64
    knn.argtypes, knn.restype = [ptr, i64, ptr, ptr, i64, i64, i32, ptr, i32], i32
    handle.splat_widest_isa.argtypes, handle.splat_widest_isa.restype = [], i32
    handle.splat_use_isa.argtypes, handle.splat_use_isa.restype = [i32], i32


def load_library(log: Optional[Callable[[str], None]] = None) -> Library:
    """The compiled rasterizer, built on first use (``log`` hears about a compile).

    Raises BuildError, naming the reason, when it cannot be built or loaded; the failure is
    remembered, so a process tries only once.
    """
    global _LOADED, _FAILED
    with _LOCK:
        if _LOADED is not None:
            return _LOADED
        if _FAILED is not None:
            raise _FAILED
        try:
            library = _load(log)
            try:
                library.use_instruction_set(None)
            except ValueError as error:
                raise BuildError(f"{ISA_VARIABLE}: {error}") from None
            _LOADED = library
        except BuildError as error:
            _FAILED = error
            raise
        return _LOADED


def cached_library() -> Optional[Library]:
    """The library when this process has loaded it or it loads from the cache; None when it would
    have to be compiled first, or cannot be loaded (never compiles, never raises)."""
    if _LOADED is not None:
        return _LOADED
    try:
        if _FAILED is not None or not library_path().is_file():
            return None
        return load_library()
    except (BuildError, OSError):
        return None


def loaded_library() -> Optional[Library]:
    """The library when this process has loaded it already, else None; never compiles."""
    return _LOADED


def _load(log: Optional[Callable[[str], None]]) -> Library:
    try:
        path = library_path()
    except OSError as error:  # e.g. an install that left out the C++ sources
        raise BuildError(f"the CPU rasterizer's sources are unreadable: {error}") from None
    built = not path.is_file()
    if built:
        cxx = find_compiler()
        if log is not None:
            log(f"compiling the CPU rasterizer (first use, a few seconds) into {path.parent}")
        _compile(cxx, path)
    try:
        handle = ctypes.CDLL(str(path))
        _declare(handle)
    except (OSError, AttributeError) as error:
        raise BuildError(f"loading {path} failed: {error}") from None
    return Library(handle, path, built)

