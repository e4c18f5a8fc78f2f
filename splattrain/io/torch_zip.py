"""The archive check every torch zip file gets before it is loaded (checkpoints, weight files)."""

from __future__ import annotations

import zipfile

from ..errors import CheckpointError


def check_torch_zip(archive: zipfile.ZipFile, size: int, name: str, why_stored: str) -> None:
    """Refuse (CheckpointError starting with ``name``) a torch zip of ``size`` bytes that loading
    would inflate beyond its size: a compressed member (``why_stored`` says why members are
    stored), or members declaring more bytes than the file holds. Reads the zip directory only."""
    members = archive.infolist()
    for member in members:
        if member.compress_type != zipfile.ZIP_STORED:
            raise CheckpointError(f"{name} has a compressed member '{member.filename}' ({why_stored})")
    declared = sum(member.file_size for member in members)
    if declared > size:
        raise CheckpointError(f"{name} declares {declared} bytes in a {size}-byte file (truncated or corrupted)")
