"""Configuration: typed schema, YAML loading, overrides."""

from .loader import config_to_yaml, read_config
from .schema import SplatConfig

__all__ = ["SplatConfig", "config_to_yaml", "read_config"]
