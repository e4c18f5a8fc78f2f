"""Errors that the command line reports as one line with exit code 2."""

from __future__ import annotations


class UserError(Exception):
    """A problem with what the user gave us (config, data, path), not a bug.

    The command line prints ``str(error)`` on one line and exits with code 2.
    """


class ConfigError(UserError):
    """A config key or value is wrong."""


class DataError(UserError):
    """A dataset folder or file cannot be used."""


class CheckpointError(UserError):
    """A checkpoint (or a weight file checked as one) is missing, truncated, corrupted or does not
    fit the run."""


def describe_os_error(error: OSError) -> str:
    """One line for a failed file operation, naming the file: what the command line prints."""
    import errno as codes

    name = error.filename if error.filename is not None else None
    where = f"'{name}'" if name is not None else "a file"
    messages = {
        codes.ENOSPC: f"no space left on device while writing {where}",
        codes.EDQUOT: f"disk quota exceeded while writing {where}",
        codes.EFBIG: f"file too large while writing {where} (a file size limit is set)",
        codes.EROFS: f"read-only file system: cannot write {where}",
        codes.EACCES: f"permission denied: {where}",
        codes.EPERM: f"operation not permitted: {where}",
        codes.ENOTDIR: f"not a directory: {where} (a file is in the way)",
        codes.EISDIR: f"{where} is a directory, not a file",
        codes.ENOENT: f"no such file or directory: {where}",
    }
    return messages.get(error.errno, f"{where}: {error.strerror or error}")
