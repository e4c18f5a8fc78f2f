"""Registry: registration, building from specs, and helpful errors."""

from __future__ import annotations

import pytest

from splattrain.errors import ConfigError
from splattrain.registry import Registry


def make_registry():
    reg = Registry("widget")

    @reg.register()
    class GreenWidget:
        """A green widget."""

        def __init__(self, size: int = 1, run_dir=None):
            self.size = size
            self.run_dir = run_dir

    @reg.register("blue", aliases=("BlueWidget",))
    class Blue:
        """Blue."""

    return reg, GreenWidget, Blue


def test_build_passes_kwargs_and_extras():
    reg, green, _ = make_registry()
    obj = reg.build({"type": "GreenWidget", "size": 3}, run_dir="x")
    assert isinstance(obj, green) and obj.size == 3 and obj.run_dir == "x"


def test_aliases_resolve_and_describe_lists_primary_names():
    reg, _, blue = make_registry()
    assert reg.get("BlueWidget") is blue and reg.get("blue") is blue
    described = reg.describe()
    assert list(described) == ["GreenWidget", "blue"]
    assert described["blue"] == "Blue. (also: BlueWidget)"
    assert list(reg) == ["GreenWidget", "blue"] and len(reg) == 2


def test_unknown_type_names_closest():
    reg, _, _ = make_registry()
    with pytest.raises(ConfigError, match=r"unknown widget type 'GreenWidgit'.*did you mean 'GreenWidget'"):
        reg.build({"type": "GreenWidgit"})


def test_bad_kwarg_is_config_error():
    reg, _, _ = make_registry()
    with pytest.raises(ConfigError, match=r"widget 'GreenWidget'.*colour"):
        reg.build({"type": "GreenWidget", "colour": "red"})


def test_missing_type():
    reg, _, _ = make_registry()
    with pytest.raises(ConfigError, match="no 'type'"):
        reg.build({"size": 2})


def test_duplicate_registration_is_refused():
    reg, _, _ = make_registry()
    with pytest.raises(KeyError, match="already registered"):

        @reg.register("blue")
        class Other:
            pass
