"""One failure policy for every plugin kind: the same bad option in a hook, writer, loss term,
strategy, renderer, dataset reader or the trainer gives one line naming the config file and the
key path (with its list index), the same in ``fit --dry-run`` and in ``fit``; a writer that cannot
start stops the run unless the config marks it ``optional: true``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_check import assert_one_line_error, config_text, run_cli

#: (kind, how the tiny config is changed, the key path the error names)
BAD_OPTIONS = [
    ("hook", lambda t: t + "custom_hooks:\n  - type: IterTimerHook\n  - type: EMAHook\n    decai: 0.9\n",
     "'custom_hooks[1].decai'"),
    ("writer", lambda t: t.replace("writers: []\n", "writers:\n  - type: jsonl\n  - type: csv\n    paht: x\n"),
     "'writers[1].paht'"),
    ("loss term", lambda t: t + "loss:\n  terms:\n    - type: l1\n      wieght: 1.0\n", "'loss.terms[0].wieght'"),
    ("strategy", lambda t: t + "strategy:\n  grow_grad2: 1\n", "'strategy.grow_grad2'"),
    ("renderer", lambda t: t.replace("  type: torch\n", "  type: torch\n  tile_sise: 8\n"), "'renderer.tile_sise'"),
    ("dataset", lambda t: t.replace("  downscale: 8\n", "  downscale: 8\n  type: blender\n  options:\n    whit_bg: 1\n"),
     "'data.options.whit_bg'"),
    ("trainer", lambda t: t.replace("  max_steps: 2\n", "  max_steps: 2\n  optionz: 1\n"), "'trainer.optionz'"),
]


@pytest.mark.parametrize("kind, change, key", BAD_OPTIONS, ids=[k for k, _, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_line_naming_file_and_key_in_dry_run_and_fit(kind, change, key, tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text(change(config_text(tmp_path / "run")))
    lines = []
    for mode in (["--dry-run"], []):
        result = run_cli("fit", "--config", str(config), "--quiet", *mode)
        lines.append(assert_one_line_error(result, f"error: {config}: ", key))
    assert lines[0] == lines[1]
    assert not (tmp_path / "run").exists()  # refused before anything was written


BROKEN_WRITER = '''
from splattrain import WRITERS, Writer


@WRITERS.register()
class BrokenWriter(Writer):
    """A writer whose service cannot be reached."""

    def __init__(self, run_dir, url: str = "http://127.0.0.1:9") -> None:
        super().__init__(run_dir)
        raise ConnectionError(f"cannot reach {url}")
'''


def _with_broken_writer(tmp_path: Path, optional: bool) -> Path:
    (tmp_path / "broken.py").write_text(BROKEN_WRITER)
    text = config_text(tmp_path / "run").replace(
        "writers: []\n", "writers:\n  - type: jsonl\n  - type: BrokenWriter\n" + ("    optional: true\n" if optional else ""))
    config = tmp_path / "cfg.yaml"
    config.write_text(f"imports: [{tmp_path / 'broken.py'}]\n" + text)
    return config


def test_a_writer_that_cannot_start_stops_the_run(tmp_path):
    result = run_cli("fit", "--config", str(_with_broken_writer(tmp_path, optional=False)), "--quiet")
    assert_one_line_error(result, "writers[1]: writer 'BrokenWriter' could not start",
                          "ConnectionError: cannot reach http://127.0.0.1:9", "optional: true")
    assert not (tmp_path / "run" / "results.json").exists()


def test_an_optional_writer_that_cannot_start_is_skipped_with_a_warning(tmp_path):
    result = run_cli("fit", "--config", str(_with_broken_writer(tmp_path, optional=True)), "--quiet")
    assert result.returncode == 0, result.stderr
    assert "writers[1]: optional writer 'BrokenWriter' could not start" in result.stdout + result.stderr
    assert json.loads((tmp_path / "run" / "results.json").read_text())["steps"] == 2
    assert (tmp_path / "run" / "metrics.jsonl").is_file()  # the other writer ran
