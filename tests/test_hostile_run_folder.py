"""The run folder against careless users and planted files: a folder that is not a run is never
written into, links are never written through, runs sharing a checkpoint folder cannot mix, a
failed resume changes nothing, ranks do not run the working directory's modules, and a full disk
names the file (through the command line)."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cli_check import assert_one_line_error, files_of, run_cli, trained, write_config  # noqa: F401
from conftest import REPO
from splattrain.checkpoints.files import load_checkpoint_file, save_checkpoint_file
from splattrain.engine.run_lock import RunLock


def copy_run(trained: Path, target: Path) -> Path:
    shutil.copytree(trained, target)
    return target


def test_fresh_fit_refuses_a_folder_that_is_not_a_run_and_overwrite_moves_it_aside(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.yaml").write_text("my own notes\n")
    (folder / "results.json").write_text('{"mine": true}\n')
    (folder / ".draft.tmp").write_text("half a thought\n")
    before = files_of(folder)
    config = write_config(tmp_path, folder)
    assert_one_line_error(run_cli("fit", "--config", str(config)), str(folder), "not empty", "--overwrite")
    assert files_of(folder) == before and sorted(p.name for p in folder.iterdir()) == sorted(before)
    result = run_cli("fit", "--config", str(config), "--overwrite", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    (aside,) = tmp_path.glob("mine.old-*")
    assert files_of(aside) == before  # moved, never deleted
    assert (folder / "results.json").read_text() != before["results.json"].decode()


@pytest.mark.parametrize("resume", [False, True])
def test_a_users_config_and_log_make_no_run(tmp_path, resume):
    """A folder holding someone's config.yaml and log.txt (the names a run writes) is not taken for
    a run: fit and fit --resume refuse it in one line and leave both files as they were."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.yaml").write_text("experiment: 7\nlearning_rate: 0.1\n")
    (folder / "log.txt").write_text("day 1: the lens fogged up\n")
    before = files_of(folder)
    config = write_config(tmp_path, folder)
    result = run_cli("fit", "--config", str(config), *(["--resume"] if resume else []))
    assert_one_line_error(result, str(folder), "not empty and holds no splattrain run", "'config.yaml'", "'log.txt'")
    assert files_of(folder) == before and sorted(p.name for p in folder.iterdir()) == sorted(before)


def test_a_run_is_known_by_its_marker_or_a_checkpoint_not_by_file_names(tmp_path, trained):
    from splattrain.engine.run_identity import MARKER_NAME, is_splattrain_run

    assert is_splattrain_run(trained)
    old = copy_run(trained, tmp_path / "old")  # a run from before markers: its checkpoints say what it is
    (old / MARKER_NAME).unlink()
    assert is_splattrain_run(old)
    names_only = tmp_path / "names"
    (names_only / "ckpt").mkdir(parents=True)
    for name in ("config.yaml", "log.txt", "ckpt/last.pt"):
        (names_only / name).write_bytes((trained / name).read_bytes()[:40])
    assert not is_splattrain_run(names_only)
    (names_only / MARKER_NAME).write_text("not a run id\n")
    assert not is_splattrain_run(names_only)
    config = write_config(tmp_path, old, steps=3)
    result = run_cli("fit", "--config", str(config), "--resume", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr


def test_only_splattrains_own_temporaries_are_removed(tmp_path, trained):
    run = copy_run(trained, tmp_path / "run")
    kept = [run / ".draft.tmp", run / ".notes.txt.abcdef12.tmp", run / "ckpt" / ".mine.tmp"]
    removed = [run / ".config.yaml.a8d7f6.tmp", run / "ckpt" / ".step_000002.pt.k3j2h1.tmp"]
    for path in kept + removed:
        path.write_text("someone's bytes")
    config = write_config(tmp_path, run, steps=3)
    result = run_cli("fit", "--config", str(config), "--resume", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(path.read_text() == "someone's bytes" for path in kept)
    assert not any(path.exists() for path in removed)


def test_run_files_that_are_symbolic_links_are_refused_not_written_through(tmp_path, trained):
    victim = tmp_path / "victim.txt"
    for name in (".splattrain.lock", "log.txt", "metrics.jsonl"):
        run = copy_run(trained, tmp_path / f"run{name}")
        victim.write_text("precious\n")
        (run / name).unlink(missing_ok=True)
        (run / name).symlink_to(victim)
        before = files_of(run)
        config = write_config(tmp_path, run, steps=3, extra="writers: [{type: jsonl}]")
        result = run_cli("fit", "--config", str(config), "--resume", "--quiet")
        assert_one_line_error(result, str(run / name), "symbolic link")
        assert victim.read_text() == "precious\n", name
        assert files_of(run) == before and (run / name).is_symlink(), name



@pytest.mark.parametrize("name", ["ply", "ckpt"])
def test_run_subfolders_that_are_symbolic_links_are_refused_not_written_through(tmp_path, trained, name):
    run = copy_run(trained, tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / name, elsewhere)  # the folder's content stays readable through the link
    (run / name).symlink_to(elsewhere, target_is_directory=True)
    before, outside = files_of(run), files_of(elsewhere)
    config = write_config(tmp_path, run, steps=4, extra="default_hooks: {checkpoint: {interval: 1}}")
    result = run_cli("fit", "--config", str(config), "--resume", "--quiet")
    assert_one_line_error(result, str(run / name), "symbolic link to a folder")
    assert files_of(elsewhere) == outside and files_of(run) == before

def test_a_log_link_in_a_fresh_run_is_never_followed(tmp_path):
    from splattrain.console import Console

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "log.txt").symlink_to(victim)
    console = Console(quiet=True)
    try:
        console.open_log(tmp_path / "log.txt")
    except Exception as err:
        assert "symbolic link" in str(err)
    else:
        raise AssertionError("a log.txt link was opened")
    assert victim.read_text() == "precious\n"


def test_a_checkpoint_folder_in_use_by_another_run_is_refused(tmp_path):
    shared = tmp_path / "shared_ckpt"
    lock = RunLock(shared).acquire()  # another process's run writing its checkpoints there
    try:
        config = write_config(tmp_path, tmp_path / "b")
        result = run_cli("fit", "--config", str(config), f"checkpoint_dir={shared}")
        assert_one_line_error(result, "checkpoint folder", str(shared), f"process {os.getpid()}")
    finally:
        lock.release()
    assert not list(shared.glob("*.pt"))


def test_resume_refuses_a_checkpoint_of_another_run(tmp_path):
    config_a = write_config(tmp_path / "a", tmp_path / "a" / "run")
    config_b = write_config(tmp_path / "b", tmp_path / "b" / "run")
    for config in (config_a, config_b):
        result = run_cli("fit", "--config", str(config), "--quiet")
        assert result.returncode == 0, result.stdout + result.stderr
    run_b = tmp_path / "b" / "run"
    before = files_of(run_b)
    foreign = tmp_path / "a" / "run" / "ckpt" / "last.pt"
    result = run_cli("fit", "--config", str(config_b), "--resume", str(foreign), "trainer.max_steps=3")
    assert_one_line_error(result, str(foreign), "another run")
    assert files_of(run_b) == before
    moved = copy_run(tmp_path / "a" / "run", tmp_path / "a_moved")  # the same run in another folder resumes
    config_moved = write_config(tmp_path / "m", moved, steps=3)
    result = run_cli("fit", "--config", str(config_moved), "--resume", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_resume_that_fails_changes_nothing_in_the_run_folder(tmp_path, trained):
    run = copy_run(trained, tmp_path / "run")
    checkpoint = load_checkpoint_file(run / "ckpt" / "last.pt")
    checkpoint["rng"]["torch"] = torch.zeros(3, dtype=torch.uint8)  # restoring it fails
    for name in ("last.pt", "step_000002.pt"):
        (run / "ckpt" / name).unlink()
        save_checkpoint_file(checkpoint, run / "ckpt" / name)
    (run / ".config.yaml.a8d7f6.tmp").write_text("a killed write")  # removed only once the checks pass
    before = files_of(run)
    config = write_config(tmp_path, run, steps=3, extra="writers: [{type: jsonl}]")
    result = run_cli("fit", "--config", str(config), "--resume", "trainer.max_steps=4")
    assert result.returncode != 0, result.stdout + result.stderr
    assert files_of(run) == before  # config.yaml not rewritten, log.txt not appended to
    assert sorted(p.name for p in run.iterdir()) == sorted({Path(n).parts[0] for n in before})


HOOK_STATES = {  # (hook states from the checkpoint's Gaussians, overrides, what the error names)
    "logger ema_loss": (lambda g: {"logger": {"ema_loss": "abc"}}, [], "'ema_loss' is 'abc'"),
    "logger previous_val": (lambda g: {"logger": {"previous_val": [1, 2]}}, [], "'previous_val'"),
    "ema updates": (lambda g: {"ema": {"updates": 5, "averaged": {"means": g["means"]}}},
                    ["default_hooks.ema.type=EMAHook"], "'updates'"),
    "ema foreign weights": (lambda g: {"ema": {"training": {"colour": torch.zeros(1)}}}, [], "hooks.ema.training"),
}


@pytest.mark.parametrize("case", sorted(HOOK_STATES))
def test_a_resume_with_a_bad_hook_state_is_refused_before_the_run_folder_changes(tmp_path, trained, case):
    """Each of these states passed the checks and failed mid-training (or after the run folder opened)."""
    states, overrides, expected = HOOK_STATES[case]
    run = copy_run(trained, tmp_path / "run")
    checkpoint = load_checkpoint_file(run / "ckpt" / "last.pt")
    checkpoint["hooks"].update(states(checkpoint["gaussians"]))
    for name in ("last.pt", "step_000002.pt"):
        (run / "ckpt" / name).unlink()
        save_checkpoint_file(checkpoint, run / "ckpt" / name)
    before = files_of(run)
    config = write_config(tmp_path, run, steps=4, extra="writers: [{type: jsonl}]")
    result = run_cli("fit", "--config", str(config), "--resume", *overrides)
    assert_one_line_error(result, str(run / "ckpt" / "last.pt"), expected)
    assert files_of(run) == before  # config.yaml not rewritten, log.txt not appended to, no rescue checkpoint


def test_ranks_do_not_import_modules_from_the_working_directory(tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "numpy.py").write_text("open(__file__ + '.ran', 'w').close()\nraise SystemExit('numpy.py ran')\n")
    config = write_config(tmp_path, tmp_path / "run")
    script = Path(sys.executable).parent / "splattrain"  # the console script: no working directory on sys.path
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([str(script), "fit", "--nproc", "2", "--config", str(config), "--quiet"], cwd=workdir,
                            env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (workdir / "numpy.py.ran").exists()
    assert (tmp_path / "run" / "results.json").is_file()


def _file_size_limit(limit: int):
    def apply() -> None:  # writes past ``limit`` bytes fail as on a full disk (EFBIG instead of ENOSPC)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_full_disk_during_validation_names_the_file_and_prints_no_traceback(tmp_path):
    extra = "writers: [{type: tensorboard}, {type: image}]"
    for limit in (2600, 6000):  # log.txt fills first; the events file fills during validation
        run = tmp_path / f"run{limit}"
        config = write_config(tmp_path, run, steps=4, extra=extra)
        text = config.read_text().replace("val_interval: 0", "val_interval: 2")
        config.write_text(text)
        result = subprocess.run([sys.executable, "-m", "splattrain", "fit", "--config", str(config), "--quiet"],
                                cwd=REPO, capture_output=True, text=True, timeout=300,
                                preexec_fn=_file_size_limit(limit))
        output = result.stdout + result.stderr
        assert result.returncode == 2, output
        assert "Traceback" not in output and "Exception in thread" not in output, output
        assert "writing a file" not in output, output
        error = result.stderr.strip().splitlines()[-1]
        assert error.startswith("error: file too large while writing '") and str(run) in error, error
        if limit == 6000:
            assert f"TensorboardWriter failed in write_image (file too large while writing '{run / 'tb'}" in output
