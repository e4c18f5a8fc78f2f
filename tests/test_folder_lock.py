"""The folder lock both the run lock and ``splattrain process`` take: one holder at a time, named
in the refusal; never through a link; released by removing the file; a read-only check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from conftest import REPO
from splattrain.engine.run_lock import RunDirectoryError, RunLock
from splattrain.folder_lock import LOCK_NAME, FolderLock, LockHeld, LockIsLink, LockNotRegular, raise_if_held
from splattrain.process.lock import OutputLock, refuse_if_held
from splattrain.process.workspace import OutputFolderError

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock is POSIX")

HOLD = ("import sys; from splattrain.folder_lock import FolderLock; FolderLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); sys.stdin.read()")


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen]:
    """Another process holding ``tmp_path / 'out'``'s lock until the test ends."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "out")], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_second_acquire_from_another_process_is_refused_naming_its_pid(tmp_path, holder):
    out = tmp_path / "out"
    with pytest.raises(LockHeld) as refused:
        FolderLock(out).acquire()
    assert refused.value.pid == holder.pid and refused.value.path == out / LOCK_NAME
    with pytest.raises(LockHeld) as checked:
        raise_if_held(out)
    assert checked.value.pid == holder.pid
    assert (out / LOCK_NAME).read_text() == f"{holder.pid}\n"  # the holder's file is left as it was


def test_the_callers_word_the_refusal_for_their_folder(tmp_path, holder):
    out = tmp_path / "out"
    lock = out / LOCK_NAME
    with pytest.raises(RunDirectoryError) as run:
        RunLock(out, "checkpoint folder").acquire()
    assert str(run.value) == (f"checkpoint folder '{out}' is in use by process {holder.pid} (lock file {lock}); "
                              "wait for it to end or choose another output_dir")
    expected = (f"{out}: output folder in use by process {holder.pid}, another splattrain process (lock file "
                f"{LOCK_NAME}); wait for it to end or give another output folder")
    for attempt in (lambda: OutputLock(out).acquire(), lambda: refuse_if_held(out)):
        with pytest.raises(OutputFolderError) as refused:
            attempt()
        assert str(refused.value) == expected


def test_a_killed_holder_s_lock_is_taken_and_its_pid_returned(tmp_path, holder):
    holder.kill()
    holder.wait()
    lock = FolderLock(tmp_path / "out")
    assert lock.acquire() == holder.pid
    assert (tmp_path / "out" / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    lock.release()


def test_release_removes_the_file_and_the_lock_is_free_again(tmp_path):
    lock = FolderLock(tmp_path / "new" / "out")
    assert lock.acquire() is None and lock.held  # the folder is made, nobody held it before
    assert (tmp_path / "new" / "out" / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    lock.release()
    assert not lock.held and not (tmp_path / "new" / "out" / LOCK_NAME).exists()
    lock.release()  # no-op
    again = FolderLock(tmp_path / "new" / "out")
    assert again.acquire() is None
    again.release()


def test_a_planted_symlink_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).symlink_to(victim)
    with pytest.raises(LockIsLink):
        FolderLock(out).acquire()
    raise_if_held(out)  # the read-only check leaves the link to acquire
    with pytest.raises(RunDirectoryError, match="is a symbolic link, which splattrain never creates; remove it"):
        RunLock(out).acquire()
    with pytest.raises(OutputFolderError, match="a symbolic link, which splattrain never creates; remove it"):
        OutputLock(out).acquire()
    assert victim.read_text() == "precious\n"
    assert (out / LOCK_NAME).is_symlink()
    (out / LOCK_NAME).unlink()
    (out / LOCK_NAME).symlink_to(tmp_path / "missing")  # a dangling link is not created through either
    with pytest.raises(LockIsLink):
        FolderLock(out).acquire()
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_lock_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    out = tmp_path / "out"
    out.mkdir()
    if kind == "fifo":
        os.mkfifo(out / LOCK_NAME)
    else:
        (out / LOCK_NAME).mkdir()
    with pytest.raises(LockNotRegular):
        FolderLock(out).acquire()
    raise_if_held(out)
    with pytest.raises(OutputFolderError, match="not a regular file; remove it"):
        OutputLock(out).acquire()


def test_the_read_only_check_makes_nothing(tmp_path):
    raise_if_held(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()
    raise_if_held(tmp_path)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / LOCK_NAME).write_text("12345\n")  # a file no live process holds
    raise_if_held(tmp_path)
    assert (tmp_path / LOCK_NAME).read_text() == "12345\n"
