"""Data-parallel training on two ranks (gloo on loopback) matches one rank with the same global batch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from dist_launch import (environment, gaussian_counts, gaussians, run_torchrun, torchrun_command, view_corrections,
                         write_config)
from splattrain.checkpoints.files import load_checkpoint_file
from splattrain.engine import load_config
from splattrain.console import Console
from splattrain.engine import DefaultTrainer

# Two ranks x 1 view and one rank x 2 views see the same views in the same order; the only
# difference is the order in which the two views' losses and gradients are added. Adam divides by
# the gradients' running RMS, so a rounding difference in a near-zero gradient can move a value by
# by up to a few learning rates (a handful of elements); the mean difference stays near rounding
# level. How near depends on the host's vector width: 5.2e-6 for the opacities after 36 steps on
# an AVX-512 Intel Xeon, under 5e-6 on AVX2 hosts, so the bound leaves 4x that.
ATOL, MEAN_ATOL, OUTLIERS = 5e-3, 2e-5, 5e-3  # OUTLIERS: share of elements more than 1e-4 apart


def _single(config: Path, run_dir: Path, resume=None, extra=()) -> DefaultTrainer:
    cfg = load_config(config, [f"output_dir={run_dir}", "trainer.batch_size=2", *extra])
    trainer = DefaultTrainer(cfg, console=Console(quiet=True))
    trainer.train(resume=resume)
    return trainer


def _assert_close(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert a[key].shape == b[key].shape, key
        torch.testing.assert_close(a[key], b[key], atol=ATOL, rtol=0, msg=key)
        difference = (a[key] - b[key]).abs()
        assert float(difference.mean()) < MEAN_ATOL, key
        assert float((difference > 1e-4).float().mean()) < OUTLIERS, key


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One rank x batch 2 straight to step 36 (checkpoints at 18 and 36), in this process."""
    folder = tmp_path_factory.mktemp("dist")
    config = write_config(folder)
    straight = _single(config, folder / "one")
    return folder, config, straight


@pytest.mark.slow
def test_two_ranks_match_one_rank_with_the_same_global_batch(runs):
    folder, config, straight = runs
    # dist_early_bytes=0: from step 21 (SH degree 1) the bands' gradients travel during the backward pass
    run_torchrun(config, [f"output_dir={folder / 'two'}", "trainer.dist_early_bytes=0"])
    one, two = folder / "one", folder / "two"
    counts = gaussian_counts(two)
    assert len(counts) == 36 and counts == gaussian_counts(one)
    assert counts[36] != 300  # densification happened
    _assert_close(gaussians(two / "ckpt" / "step_000036.pt"), gaussians(one / "ckpt" / "step_000036.pt"))
    corrections = [view_corrections(run / "ckpt" / "step_000036.pt") for run in (two, one)]
    assert all(float(v.abs().max()) > 0 for v in corrections[1].values())  # appearance and poses were learned
    _assert_close(*corrections)
    # only rank 0 wrote, the same files as a single process
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())
    # the ranks scored half the test views each; rank 0 gathered them in view order
    results = [json.loads((run / "results.json").read_text()) for run in (one, two)]
    assert [v["view"] for v in results[1]["per_view"]] == [v["view"] for v in results[0]["per_view"]]
    assert len(results[1]["per_view"]) == 10
    assert results[1]["psnr"] == pytest.approx(results[0]["psnr"], abs=1e-3)
    assert results[1]["num_gaussians"] == results[0]["num_gaussians"]


@pytest.mark.slow
def test_resume_across_world_sizes(runs):
    """Two ranks to step 18 then one rank to 36, and one rank to 18 then two ranks (as two nodes
    rendezvousing on 127.0.0.1) to 36, both equal one rank straight to 36."""
    folder, config, straight = runs
    reference = gaussians(folder / "one" / "ckpt" / "step_000036.pt")
    if not (folder / "two" / "ckpt" / "step_000018.pt").exists():
        run_torchrun(config, [f"output_dir={folder / 'two'}", "trainer.max_steps=18"])
    resumed = _single(config, folder / "two_then_one", resume=folder / "two" / "ckpt" / "step_000018.pt")
    assert resumed.step == 36
    _assert_close(resumed.model.state_dict(), reference)

    port = str(_free_port())
    overrides = [f"output_dir={folder / 'one_then_two'}", "--resume", str(folder / "one" / "ckpt" / "step_000018.pt")]
    nodes = [subprocess.Popen(torchrun_command(config, overrides, nproc=1, port=int(port), node=(rank, 2)),
                              env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    _assert_close(gaussians(folder / "one_then_two" / "ckpt" / "step_000036.pt"), reference)
    results = (folder / "one_then_two" / "results.json").read_text()
    assert '"steps": 36' in results


@pytest.mark.slow
def test_contribution_pruning_removes_the_same_rows_on_every_rank(runs):
    """Each rank scores every training view and the ranks agree on the scores before choosing: the
    replicas stay equal (checked before each checkpoint) and lose what one rank loses."""
    folder, config, _ = runs
    hook = "custom_hooks=[{type: ContributionPruneHook, steps: [25], fraction: 0.5}]"
    _single(config, folder / "prune_one", extra=[hook])
    run_torchrun(config, [f"output_dir={folder / 'prune_two'}", hook])
    counts = gaussian_counts(folder / "prune_two")
    assert counts == gaussian_counts(folder / "prune_one")
    assert counts[25] == counts[24] - counts[24] // 2


def _free_port() -> int:
    from dist_launch import free_port

    return free_port()


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _rank_of(pid: int) -> int:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return int(next(v for v in environ if v.startswith(b"RANK=")).split(b"=")[1])


@pytest.mark.slow
def test_sigterm_to_one_rank_stops_every_rank_with_a_checkpoint(runs):
    folder, config, _ = runs
    run_dir = folder / "signal"
    launcher = subprocess.Popen(
        torchrun_command(config, [f"output_dir={run_dir}", "trainer.max_steps=100000",
                                  "default_hooks.checkpoint.interval=0"]),
        env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    workers: dict = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(gaussian_counts(run_dir) if (run_dir / "scalars.csv").exists() else {}) < 5:
            time.sleep(0.2)
        workers = {_rank_of(pid): pid for pid in _children(launcher.pid)}
        assert sorted(workers) == [0, 1]
        os.kill(workers[1], signal.SIGTERM)
        output = launcher.communicate(timeout=120)[0]
    finally:
        ranks = {*workers.values(), *_children(launcher.pid)}  # nothing outlives the test, a failing one either
        for kill, pid in [(os.killpg, launcher.pid), *((os.kill, rank) for rank in ranks)]:
            try:
                kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        launcher.wait()
    assert launcher.returncode != 0
    saved = sorted((run_dir / "ckpt").glob("step_*.pt"))
    assert len(saved) == 1 and (run_dir / "ckpt" / "last.pt").exists(), output[-3000:]
    step = int(saved[0].stem.split("_")[1])
    assert step >= 5
    assert "SIGTERM received" in output
    # a reset within the two steps would be refused as too late: the resumed run has none
    resumed = _single(config, run_dir, resume="latest", extra=[f"trainer.max_steps={step + 2}", "strategy.reset_every=1000"])
    assert resumed.step == step + 2


@pytest.mark.slow
def test_per_view_appearance_stays_identical_across_ranks_and_matches_one_rank(runs):
    """Each rank renders only its own views, yet every rank's per-view appearance parameters take
    the same averaged step (the check hook compares them bit for bit before the checkpoint), equal
    to one rank x batch 2's."""
    folder, config, _ = runs
    extra = ["trainer.max_steps=12", "appearance.type=affine", "default_hooks.checkpoint.interval=12"]
    run_torchrun(config, [f"output_dir={folder / 'app_two'}", *extra])
    single = _single(config, folder / "app_one", extra=extra)
    two = load_checkpoint_file(folder / "app_two" / "ckpt" / "step_000012.pt")["view_opt"]["appearance"]["module"]
    one = single.view_opt.state_dict()["appearance"]["module"]
    assert one.keys() == two.keys()
    for key in one:
        assert float(one[key].abs().max()) > 0, key  # the corrections start at zero and were learned
        torch.testing.assert_close(two[key], one[key], atol=1e-4, rtol=0, msg=key)


FAILING_HOOK = '''
import os
from splattrain import HOOKS, Hook
from splattrain.errors import DataError


@HOOKS.register()
class FailOnRankOne(Hook):
    def after_train_iter(self, trainer, step, batch, outputs):
        if step == 4 and os.environ.get("RANK") == "1":
            raise DataError("view 3 cannot be read (injected on rank 1)")
'''


@pytest.mark.slow
def test_an_error_on_rank_one_stops_every_rank_with_one_line_each(runs):
    """Rank 1 fails after step 4: it prints its error, rank 0 stops in its next collective with one
    line (no traceback) and writes the rescue checkpoint of the last completed step."""
    folder, config, _ = runs
    (folder / "fail_hook.py").write_text(FAILING_HOOK)
    failing = folder / "cfg_fail.yaml"
    failing.write_text(config.read_text() + "imports: [fail_hook.py]\ncustom_hooks:\n  - type: FailOnRankOne\n")
    run_dir = folder / "fail"
    command = [sys.executable, "-m", "splattrain", "fit", "--nproc", "2", "--config", str(failing), "--quiet",
               f"output_dir={run_dir}", "trainer.max_steps=20"]
    result = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=300, cwd=folder)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    assert "[rank 1] error: view 3 cannot be read (injected on rank 1)" in output
    assert "error: rank 0 of 2: another rank left the run" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    rescued = sorted(run_dir.rglob("rescue_step_*.pt"))
    assert len(rescued) == 1 and int(rescued[0].stem.split("_")[-1]) >= 4, output[-3000:]
    assert "saved a rescue checkpoint" in output


SIGNAL_HOOK = '''
import os
import signal
from splattrain import HOOKS, Hook


@HOOKS.register()
class SigtermDuringValidationOnRankOne(Hook):
    def after_val_iter(self, trainer, index, batch, outputs):
        if os.environ.get("RANK") == "1" and not getattr(self, "sent", False):
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)
'''


@pytest.mark.slow
def test_sigterm_during_the_last_validation_on_one_rank_stops_every_rank(runs):
    """SIGTERM reaches rank 1 while it scores its test views after the last step: both ranks
    finish validating, agree, and stop with 143 before writing results; the run is resumable."""
    folder, config, _ = runs
    (folder / "signal_hook.py").write_text(SIGNAL_HOOK)
    signalled = folder / "cfg_signal.yaml"
    signalled.write_text(config.read_text() + "imports: [signal_hook.py]\ncustom_hooks:\n  - type: SigtermDuringValidationOnRankOne\n")
    run_dir = folder / "signal_val"
    command = [sys.executable, "-m", "splattrain", "fit", "--nproc", "2", "--config", str(signalled),
               f"output_dir={run_dir}", "trainer.max_steps=6", "default_hooks.checkpoint.interval=6"]
    result = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=300, cwd=folder)
    output = result.stdout + result.stderr
    assert result.returncode == 143, output[-3000:]
    assert "SIGTERM received after the last step" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert (run_dir / "ckpt" / "last.pt").exists() and not (run_dir / "results.json").exists()
