"""Registries know where their built-ins live (``locations``) and import them on first use: the
registry is the one source of what exists, for the engine, ``splattrain list`` and users alike."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cli_check import run_cli
from splattrain import registry
from splattrain.cli import _REGISTRIES
from splattrain.registry import Registry


def _fresh(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_a_registry_imports_its_locations_on_first_use_only():
    code = ("import sys\nfrom splattrain.registry import HOOKS\n"
            "before = 'splattrain.hooks' in sys.modules\nnames = list(HOOKS)\n"
            "print(before, 'splattrain.hooks' in sys.modules, 'LogHook' in names, 'EMAHook' in HOOKS)")
    assert _fresh(code) == "False True True True"


def test_a_user_plugin_cannot_take_a_built_in_name_whatever_the_import_order():
    code = ("from splattrain.registry import HOOKS\n"
            "try:\n    HOOKS.register('LogHook')(type('Mine', (), {}))\n    print('taken')\n"
            "except KeyError as err:\n    print('refused')")
    assert _fresh(code) == "refused"


def test_locations_are_imported_once_and_may_look_themselves_up(tmp_path, monkeypatch):
    package = tmp_path / "widgets_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from splattrain.registry import Registry\nWIDGETS = Registry('widget', locations=('widgets_pkg.parts',))\n")
    (package / "parts.py").write_text(
        "from widgets_pkg import WIDGETS\nLOADS = 1\n\n@WIDGETS.register()\nclass Gear:\n    '''Turns.'''\n\n"
        "assert 'Gear' in WIDGETS  # a lookup while the location loads\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from widgets_pkg import WIDGETS  # noqa: PLC0415

    assert WIDGETS.describe() == {"Gear": "Turns."} and WIDGETS.get("Gear").__name__ == "Gear"
    assert sys.modules["widgets_pkg.parts"].LOADS == 1


@pytest.mark.parametrize("kind", sorted(_REGISTRIES))
def test_list_shows_what_the_registry_holds(kind):
    reg = getattr(registry, _REGISTRIES[kind])
    result = run_cli("list", kind)
    assert result.returncode == 0, result.stderr
    builtin = [name for name, cls in reg.entries() if cls.__module__.startswith("splattrain.")]
    assert builtin and all(name in result.stdout for name in builtin)


def test_help_starts_without_torch():
    code = ("import sys\nfrom splattrain.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)")
    assert _fresh(code) == "False"


def test_a_registry_without_locations_holds_what_was_registered():
    widgets = Registry("widget")
    widgets.register()(type("Cog", (), {}))
    assert list(widgets) == ["Cog"]
