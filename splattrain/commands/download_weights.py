"""``splattrain download-weights lpips``: fetch LPIPS's weight files ahead of a run."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from ..console import Console
from ..metrics.lpips_files import SOURCES, fetch


def download_weights(console: Console, what: str, net: str = "alex", folder: Optional[str | Path] = None) -> List[Path]:
    """Make sure ``net``'s LPIPS files are in ``folder`` (default: torch's hub cache, where runs look
    for them), downloading what is missing and checking every file's SHA-256; the paths, backbone first.
    A failed download or a differing file is a :class:`~splattrain.download.DownloadError` (one line)."""
    if what != "lpips" or net not in SOURCES:  # the command line offers only these
        raise ValueError(f"no weight files for {what} {net}")
    paths = []
    for source, path, downloaded in fetch(net, folder, console.transfer):
        state = "downloaded" if downloaded else "already there"
        console.info(f"{source.what}: {path} ({state}, SHA-256 {source.sha256[:12]}... verified)")
        paths.append(path)
    if folder is not None:
        console.info(f"set metrics.lpips_weights: {Path(folder).expanduser()} for runs to read them from there")
    return paths
