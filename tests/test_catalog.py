"""`splattrain list` reads registrations from the sources: it must agree with the registries and
start without PyTorch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from splattrain.catalog import describe_builtin


@pytest.mark.parametrize("kind", ["hooks", "writers", "datasets", "renderers", "losses", "strategies", "trainers"])
def test_catalog_matches_the_registries(kind):
    import splattrain.engine  # noqa: F401  (imports every built-in plugin package)
    from splattrain import registry
    from splattrain.cli import _REGISTRIES

    reg = getattr(registry, _REGISTRIES[kind])
    builtin = {name: line for name, line in reg.describe().items()
               if reg.get(name).__module__.startswith("splattrain.")}  # not what other tests registered
    assert describe_builtin(kind) == builtin


def test_catalog_reads_a_registration(tmp_path):
    (tmp_path / "mine.py").write_text(
        "from splattrain import HOOKS\n\n"
        "@HOOKS.register('shout', aliases=('ShoutHook',))\n"
        "class Shout:\n    '''Says things.\n\n    More.'''\n\n"
        "@HOOKS.register()\nclass Quiet:\n    pass\n"
    )
    assert describe_builtin("hooks", tmp_path) == {"Quiet": "", "shout": "Says things. (also: ShoutHook)"}


@pytest.mark.parametrize("argv", [["--help"], ["list", "hooks"], ["list", "renderers"], ["list", "strategies"]])
def test_help_and_list_do_not_import_torch(argv):
    code = ("import sys\nfrom splattrain.cli import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)") % (argv,)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip().splitlines()[-1] == "False"
