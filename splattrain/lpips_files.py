"""LPIPS's two weight files per network: where they come from, where they are looked for, and
fetching them on first use.

Each network needs torchvision's ImageNet backbone and the LPIPS v0.1 linear layers, both
downloaded from their official URLs and checked against the full SHA-256 digests in
:data:`SOURCES`. torchvision names its files after the first 8 hex digits of that digest
(``alexnet-owt-7be5be79.pth``) and checks only those; the full digests are those of the files
as served, and the linear layers' are those of the same files in the lpips 0.1.4 wheel on
PyPI. Downloads go to torch's hub cache: the
backbone where torchvision keeps it (``<hub>/checkpoints``), the linear layers in
``<hub>/checkpoints/lpips_v0.1`` so that no other tool's ``alex.pth`` is taken for them.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import torch

from .download import DownloadError, Progress, download as download_file, sha256_of
from .lpips_net import BACKBONES, LPIPSNet, load_lpips

#: The command that fetches the files ahead of time (named in every message about missing files).
FETCH_COMMAND = "splattrain download-weights lpips"


@dataclass(frozen=True)
class WeightFile:
    """One file to fetch: what it is, its official URL, its SHA-256 and its name on disk."""

    what: str
    url: str
    sha256: str

    @property
    def name(self) -> str:
        """The file name: the last part of its URL (what a browser would save it as)."""
        return self.url.rstrip("/").rsplit("/", 1)[-1]


_LPIPS_RAW = "https://github.com/richzhang/PerceptualSimilarity/raw/master/lpips/weights/v0.1"

#: net -> (torchvision's backbone, the LPIPS v0.1 linear layers). Tests point these at a local server.
SOURCES: Dict[str, Tuple[WeightFile, WeightFile]] = {
    "alex": (
        WeightFile("torchvision's AlexNet", "https://download.pytorch.org/models/alexnet-owt-7be5be79.pth",
                   "7be5be791159472b1fbf3c69796f7cb30dca7ad8466c2df70058c37116cdee02"),
        WeightFile("LPIPS v0.1 linear layers", f"{_LPIPS_RAW}/alex.pth",
                   "df73285e35b22355a2df87cdb6b70b343713b667eddbda73e1977e0c860835c0"),
    ),
    "vgg": (
        WeightFile("torchvision's VGG16", "https://download.pytorch.org/models/vgg16-397923af.pth",
                   "397923af8e79cdbb6a7127f12361acd7a2f83e06b05044ddf496e83de57a5bf0"),
        WeightFile("LPIPS v0.1 linear layers", f"{_LPIPS_RAW}/vgg.pth",
                   "a78928a0af1e5f0fcb1f3b9e8f8c3a2a5a3de244d830ad5c1feddc79b8432868"),
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
    against its SHA-256. :class:`DownloadError` when one cannot be fetched, or a file already
    there differs (it is left as it is)."""
    out = []
    for source, path in zip(SOURCES[net], destinations(net, folder)):
        if path.is_file():
            digest = sha256_of(path)
            if digest != source.sha256:
                raise DownloadError(source.url, path, f"a file is already there and its SHA-256 is {digest}, not "
                                    f"{source.sha256}; remove it to download it again")
            out.append((source, path, False))
        else:
            out.append((source, download_file(source.url, path, source.sha256, progress), True))
    return out


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
            found = [path or download_file(source.url, target, source.sha256, progress)
                     for path, source, target in zip(found, SOURCES[net], destinations(net))]
        except DownloadError as err:
            return None, f"{err}; or run `{FETCH_COMMAND}{_net_option(net)}` where there is network"
    backbone, linear = found
    if backbone is None or linear is None:
        return None, _missing(net, found, looked)
    return load_lpips(net, backbone, linear)


def _net_option(net: str) -> str:
    return "" if net == "alex" else f" --net {net}"


def _missing(net: str, found: List[Optional[Path]], looked: Tuple[List[Path], List[Path]]) -> str:
    """One line naming the missing files, the places looked in and how to get them."""
    missing = [f"{source.what} {source.name} (looked in {', '.join(str(p.parent) for p in paths)})"
               for source, path, paths in zip(SOURCES[net], found, looked) if path is None]
    return (f"missing {' and '.join(missing)}; metrics.lpips_download is false: run "
            f"`{FETCH_COMMAND}{_net_option(net)}` to fetch them, or set metrics.lpips_download: true")
