"""Console output: progress bar vs plain lines, quiet/verbose, log.txt, the validation report."""

from __future__ import annotations

import io
import re
import subprocess
import sys

from rich.console import Console as RichConsole

from conftest import REPO, tiny_config_text
from splattrain.console import Console, ProgressLogger, validation_table

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # anything but tab and newline


def make_console(tmp_path, tty: bool, **kwargs) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    console = Console(terminal=RichConsole(file=out, force_terminal=tty, width=120), **kwargs)
    console.open_log(tmp_path / "log.txt")
    return console, out


def run_progress(console: Console, total: int = 10, interval: int = 4) -> None:
    with ProgressLogger(console, total, interval=interval) as progress:
        for step in range(1, total + 1):
            progress.update(step, {"ema_loss": 0.5 / step, "gaussians": 1000 + step, "lr/means": 1.6e-4,
                                   "test psnr": "20.00 @4"})


def test_non_tty_prints_plain_lines_every_interval_and_no_control_characters(tmp_path):
    console, out = make_console(tmp_path, tty=False)
    run_progress(console)
    console.close()
    lines = out.getvalue().splitlines()
    assert [line.split("  ")[0] for line in lines] == ["step 4/10", "step 8/10", "step 10/10"]
    assert "it/s" in lines[0] and "eta" in lines[0] and "ema_loss 0.1250" in lines[0] and "gaussians 1004" in lines[0]
    assert "lr/means 1.600e-04" in lines[0] and "test psnr 20.00 @4" in lines[0]
    assert not CONTROL.search(out.getvalue())
    assert (tmp_path / "log.txt").read_text().splitlines() == lines


def test_tty_draws_a_live_bar_and_logs_plain_lines(tmp_path):
    console, out = make_console(tmp_path, tty=True)
    run_progress(console)
    console.close()
    assert "\x1b[" in out.getvalue() and "it/s" in out.getvalue() and "gaussians 1010" in out.getvalue()
    log = (tmp_path / "log.txt").read_text()
    assert [line.split("  ")[0] for line in log.splitlines()] == ["step 4/10", "step 8/10", "step 10/10"]
    assert not CONTROL.search(log)


def test_quiet_shows_only_warnings_verbose_adds_debug_and_the_log_gets_everything(tmp_path):
    console, out = make_console(tmp_path, tty=True, quiet=True)
    run_progress(console)
    console.info("hello")
    console.debug("details")
    console.warning("careful", once="k")
    console.warning("careful again", once="k")
    console.close()
    assert "step" not in out.getvalue() and "hello" not in out.getvalue()
    assert "careful" in out.getvalue() and "again" not in out.getvalue()
    log = (tmp_path / "log.txt").read_text()
    assert "step 10/10" in log and "hello" in log and "details" in log and "warning: careful" in log

    console, out = make_console(tmp_path, tty=False, verbose=True)
    console.debug("details")
    console.table("hooks", ["point", "hooks"], [["before_run", "X"]], terminal=False)
    console.close()
    assert out.getvalue() == "details\n"


def test_warning_text_is_not_markup(tmp_path):
    console, out = make_console(tmp_path, tty=False)
    console.warning("writer X failed (OSError: [Errno 28] No space left) [/oops]")
    console.close()
    assert "[Errno 28] No space left) [/oops]" in out.getvalue()
    assert "[Errno 28]" in (tmp_path / "log.txt").read_text()


def render(table) -> str:
    out = io.StringIO()
    RichConsole(file=out, width=100).print(table)
    return out.getvalue()


def test_validation_table_lists_worst_views_first_with_mean_and_change():
    per_view = [{"view": f"r_{i}", "psnr": 20.0 + i, "ssim": 0.8, "lpips": 0.1 * i} for i in (3, 0, 2, 1)]
    mean = {"psnr": 21.5, "ssim": 0.8, "lpips": 0.15}
    text = render(validation_table(400, per_view, mean, {"psnr": 21.0, "ssim": 0.81, "lpips": 0.15}, max_views=3))
    rows = [line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│")]
    assert rows == ["r_0", "r_1", "r_2", "mean", "change"]
    assert "validation at step 400 (worst 3 of 4 views)" in text
    assert "LPIPS" in text and "21.50" in text
    change = next(line for line in text.splitlines() if "change" in line)
    assert [cell.strip() for cell in change.split("│")[2:5]] == ["+0.50", "-0.0100", "+0.0000"]


def test_validation_table_without_lpips_or_previous():
    per_view = [{"view": "a", "psnr": 30.0, "ssim": 0.9, "lpips": None}]
    text = render(validation_table(10, per_view, {"psnr": 30.0, "ssim": 0.9}, {}, max_views=10))
    assert "LPIPS" not in text and "change" not in text and "worst view first" in text


def test_fit_in_a_pipe_prints_header_periodic_lines_report_and_no_control_characters(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(tiny_config_text(tmp_path, steps=6))
    result = subprocess.run(
        [sys.executable, "-m", "splattrain", "fit", "--config", str(cfg), "default_hooks.logger.interval=2",
         "default_hooks.checkpoint=null"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert not CONTROL.search(out), repr(out)
    assert re.search(r"scene tiny .* 48 train / 10 test views, 32x32", out)
    assert re.search(r"device cpu  renderer \w+ .* gaussians 300  steps 6", out)
    assert re.findall(r"^step (\d)/6  [\d.]+ it/s  eta [\d:]+  ema_loss [\d.]+  gaussians 300  lr/means ", out, re.M) == \
        ["2", "4", "6"]
    assert "validation at step 6 (worst view first)" in out and "│ mean " in out
    assert "hooks (priority)" not in out  # the hook table is for --verbose and log.txt
    log = (tmp_path / "run" / "log.txt").read_text()
    assert not CONTROL.search(log)
    for fragment in ["scene tiny", "hooks (priority)", "step 4/6", "validation at step 6", "done: psnr"]:
        assert fragment in log, fragment
    assert " lpips null " in out.splitlines()[-1] and "None" not in out.splitlines()[-1]
    assert out.strip().splitlines()[-1] == log.strip().splitlines()[-1]  # the final line is logged too


def test_info_prints_text_as_given_and_markup_only_when_asked(tmp_path):
    console, out = make_console(tmp_path, tty=False)
    console.info("[plateau] x")
    console.info("[bold]header[/bold] :smile:", markup=True)
    console.debug("[dim]not shown[/dim]")
    console.close()
    assert out.getvalue().splitlines() == ["[plateau] x", "header 😄"]
    assert (tmp_path / "log.txt").read_text().splitlines() == ["[plateau] x", "header 😄", "[dim]not shown[/dim]"]


def test_a_hooks_line_and_the_final_validation_reach_the_bar_and_the_log(tmp_path):
    from splattrain.engine import load_config
    from splattrain.engine import DefaultTrainer
    from splattrain.hooks import Hook

    class Plateau(Hook):
        def after_val(self, trainer, metrics):
            trainer.console.info(f"[plateau] psnr {metrics['psnr']:.2f} at step {metrics['step']}")

    (tmp_path / "cfg.yaml").write_text(tiny_config_text(tmp_path, steps=6))
    out = io.StringIO()
    console = Console(terminal=RichConsole(file=out, force_terminal=True, width=200))
    trainer = DefaultTrainer(load_config(tmp_path / "cfg.yaml", ["writers=[]", "default_hooks.checkpoint=null"]),
                             console=console)
    trainer.register_hook(Plateau())
    trainer.train()
    psnr = trainer.last_metrics["psnr"]
    shown = out.getvalue()
    assert f"[plateau] psnr {psnr:.2f} at step 6" in shown
    assert f"test psnr {psnr:.2f} @6" in shown  # the bar, refreshed after the last validation
    assert "ema_loss" in shown and "lr/means" in shown
    assert f"[plateau] psnr {psnr:.2f} at step 6" in (tmp_path / "run" / "log.txt").read_text()


def test_the_done_line_shows_null_and_mappings_plainly():
    from splattrain.commands.fit import _shown

    assert [_shown(v) for v in (None, 20.12346, 7, True)] == ["null", "20.1235", "7", "true"]
    assert _shown({"step": 4, "reason": "early stopping: psnr flat", "extra": None}) == \
        "(step 4, reason early stopping: psnr flat, extra null)"
