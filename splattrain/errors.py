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
