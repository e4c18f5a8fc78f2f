"""LPIPS's two weight files per network: where they come from, where they are looked for, and
fetching them on first use.

Each network needs torchvision's ImageNet backbone and the LPIPS v0.1 linear layers, both
downloaded from their official URLs and checked against the sizes and full SHA-256 digests
in :data:`SOURCES`. torchvision names its files after the first 8 hex digits of that digest
(``alexnet-owt-7be5be79.pth``) and checks only those; the full digests are those of the files
as served, and the linear layers' are those of the same files in the lpips 0.1.4 wheel on
PyPI. Before either file is loaded, wherever it was found, it passes the archive checks a
checkpoint gets (:func:`~splattrain.io.torch_zip.check_torch_zip`: no member that would inflate
beyond the file). Downloads go to torch's hub cache: the
backbone where torchvision keeps it (``<hub>/checkpoints``), the linear layers in
``<hub>/checkpoints/lpips_v0.1`` so that no other tool's ``alex.pth`` is taken for them.
"""

from __future__ import annotations

import importlib.util
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from ..errors import CheckpointError
from ..io.torch_zip import check_torch_zip
from ..download import DownloadError, Progress, download as download_file, sha256_of
from .lpips_net import BACKBONES, LPIPSNet, load_lpips

#: The command that fetches the files ahead of time (named in every message about missing files).
FETCH_COMMAND = "splattrain download-weights lpips"


@dataclass(frozen=True)
class WeightFile:
    """One file to fetch: what it is, its official URL, its SHA-256, its size in bytes and its name on disk."""

    what: str
    url: str
    sha256: str
    size: int

    @property
    def name(self) -> str:
        """The file name: the last part of its URL (what a browser would save it as)."""
        return self.url.rstrip("/").rsplit("/", 1)[-1]


_LPIPS_RAW = "https://github.com/richzhang/PerceptualSimilarity/raw/master/lpips/weights/v0.1"

#: net -> (torchvision's backbone, the LPIPS v0.1 linear layers). Tests point these at a local server.
SOURCES: Dict[str, Tuple[WeightFile, WeightFile]] = {
    "alex": (
        WeightFile("torchvision's AlexNet", "https://download.pytorch.org/models/alexnet-owt-7be5be79.pth",
                   "7be5be791159472b1fbf3c69796f7cb30dca7ad8466c2df70058c37116cdee02", 244_408_911),
        WeightFile("LPIPS v0.1 linear layers", f"{_LPIPS_RAW}/alex.pth",
                   "df73285e35b22355a2df87cdb6b70b343713b667eddbda73e1977e0c860835c0", 6_009),
    ),
    "vgg": (
        WeightFile("torchvision's VGG16", "https://download.pytorch.org/models/vgg16-397923af.pth",
                   "397923af8e79cdbb6a7127f12361acd7a2f83e06b05044ddf496e83de57a5bf0", 553_433_881),
        WeightFile("LPIPS v0.1 linear layers", f"{_LPIPS_RAW}/vgg.pth",
                   "a78928a0af1e5f0fcb1f3b9e8f8c3a2a5a3de244d830ad5c1feddc79b8432868", 7_289),
    ),
}


def hub_folders() -> Tuple[Path, Path]:
    """Where downloads go in torch's hub cache: (backbone folder, linear-layer folder)."""
    checkpoints = Path(torch.hub.get_dir()) / "checkpoints"
    return checkpoints, checkpoints / "lpips_v0.1"


def lpips_package_weights_dir() -> Optional[Path]:
    """The installed lpips package's ``weights/v0.1`` folder, found without importing the package."""
    try:
        spec = importlib.util.find_spec("lpips")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "weights" / "v0.1"


def candidates(net: str, folder: Optional[str | Path] = None) -> Tuple[List[Path], List[Path]]:
    """Where the backbone and the linear-layer files are looked for, in order: ``folder``
    (``metrics.lpips_weights``), torch's hub cache, and (linear layers) the lpips package."""
    backbone, linear = (source.name for source in SOURCES[net])
    first = [Path(folder).expanduser()] if folder else []
    backbone_dir, linear_dir = hub_folders()
    backbones = [d / backbone for d in first] + [backbone_dir / backbone]
    linears = [d / linear for d in first] + [linear_dir / linear]
    package = lpips_package_weights_dir()
    if package is not None:
        linears.append(package / linear)
    return backbones, linears


def destinations(net: str, folder: Optional[str | Path] = None) -> Tuple[Path, Path]:
    """Where ``net``'s (backbone, linear-layer) files are downloaded to: ``folder`` when given
    (the layout ``metrics.lpips_weights`` reads), else torch's hub cache."""
    backbone, linear = SOURCES[net]
    if folder is not None:
        folder = Path(folder).expanduser()
        return folder / backbone.name, folder / linear.name
    backbone_dir, linear_dir = hub_folders()
    return backbone_dir / backbone.name, linear_dir / linear.name


def fetch(net: str, folder: Optional[str | Path] = None, progress: Optional[Progress] = None
          ) -> List[Tuple[WeightFile, Path, bool]]:
    """Make sure ``net``'s two files are in ``folder`` (default: torch's hub cache), downloading
    what is missing; ``(source, path, downloaded)`` per file. A file already there is checked
    against its size and SHA-256. :class:`DownloadError` when one cannot be fetched, or a file
    already there differs (it is left as it is)."""
    out = []
    for source, path in zip(SOURCES[net], destinations(net, folder)):
        if path.is_file():
            _require_same(source, path)
            out.append((source, path, False))
        else:
            out.append((source, _download(source, path, progress), True))
    return out


def _download(source: WeightFile, path: Path, progress: Optional[Progress]) -> Path:
    return download_file(source.url, path, source.sha256, source.size, progress)


def _require_same(source: WeightFile, path: Path) -> None:
    """Refuse (DownloadError) a file already at ``path`` that is not ``source``'s."""
    size = path.stat().st_size
    digest = sha256_of(path) if size == source.size else None
    if digest != source.sha256:
        found = f"its SHA-256 is {digest}, not {source.sha256}" if digest else f"it is {size:,} bytes, not {source.size:,}"
        raise DownloadError(source.url, path, f"a file is already there and {found}; remove it to download it again")


def _first(paths: List[Path]) -> Optional[Path]:
    return next((path for path in paths if path.is_file()), None)


def build_lpips(net: str = "alex", folder: Optional[str | Path] = None, download: bool = False,
                progress: Optional[Progress] = None) -> Tuple[Optional[LPIPSNet], str]:
    """(the network, "") once both files are found (or, with ``download``, fetched into the hub
    cache and verified), else (None, one line saying why and naming where the files go)."""
    if net not in BACKBONES:
        return None, f"unknown LPIPS network {net!r} (use one of {', '.join(BACKBONES)})"
    looked = candidates(net, folder)
    found = [_first(paths) for paths in looked]
    if download:
        try:
            found = [path or _download(source, target, progress)
                     for path, source, target in zip(found, SOURCES[net], destinations(net))]
        except DownloadError as err:
            return None, f"{err}; or run `{FETCH_COMMAND}{_net_option(net)}` where there is network"
    backbone, linear = found
    if backbone is None or linear is None:
        return None, _missing(net, found, looked)
    try:
        for path in (backbone, linear):
            check_weight_archive(path)
    except CheckpointError as err:
        return None, str(err)
    return load_lpips(net, backbone, linear)


def check_weight_archive(path: Path) -> None:
    """Refuse (CheckpointError naming ``path``) a weight file in torch's zip format whose members
    loading would inflate beyond the file (the check every checkpoint gets), before anything is
    read from it. A file in torch's legacy format (the LPIPS linear layers) is left to torch."""
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError):
        return  # not a zip: torch.load reads it (or says why not)
    with archive:
        check_torch_zip(archive, path.stat().st_size, f"LPIPS weight file {path}",
                        "torch writes every member uncompressed; loading would inflate this one in memory")


def _net_option(net: str) -> str:
    return "" if net == "alex" else f" --net {net}"


def _missing(net: str, found: List[Optional[Path]], looked: Tuple[List[Path], List[Path]]) -> str:
    """One line naming the missing files, the places looked in and how to get them."""
    missing = [f"{source.what} {source.name} (looked in {', '.join(str(p.parent) for p in paths)})"
               for source, path, paths in zip(SOURCES[net], found, looked) if path is None]
    return (f"missing {' and '.join(missing)}; metrics.lpips_download is false: run "
            f"`{FETCH_COMMAND}{_net_option(net)}` to fetch them, or set metrics.lpips_download: true")
