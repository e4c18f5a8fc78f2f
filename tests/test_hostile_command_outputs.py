"""eval, render, export and the viewer write only where they own the path: a symbolic link planted
at any level they write (or a folder that holds no run) is refused in one line and the files at the
link's target keep their bytes; fit refuses run and checkpoint folders that cannot be a run's own;
a run with its own checkpoint_dir is found by the commands; render keeps no frame in memory."""

from __future__ import annotations

import io
import os
import shutil
import weakref
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from cli_check import assert_one_line_error, files_of, run_cli, trained, write_config  # noqa: F401
from conftest import REPO

STEP = "step_000002"
#: Files a command would write, planted at a link's target with bytes that must survive.
PRECIOUS = ["metrics.json", "render.gif", "render.mp4", f"{STEP}.ply", f"{STEP}/metrics.json", "frame_0000.png",
            "frame_0000.npy", "frames/frame_0000.png", f"test_{STEP}/render.gif", "r_0.png", "precious.bin"]

#: command line (after the run folder), the link planted (relative to the run), and whether it links a file.
LINKS = {
    "eval: eval/": (["eval"], "eval", False),
    "eval: eval/step": (["eval"], f"eval/{STEP}", False),
    "eval: metrics.json": (["eval"], f"eval/{STEP}/metrics.json", True),
    "eval: renders/": (["eval", "--save-renders"], f"eval/{STEP}/renders", False),
    "render: renders/": (["render"], "renders", False),
    "render: renders/test_step": (["render"], f"renders/test_{STEP}", False),
    "render: frames/": (["render"], f"renders/test_{STEP}/frames", False),
    "render: depth/": (["render"], f"renders/test_{STEP}/depth", False),
    "render: a frame": (["render"], f"renders/test_{STEP}/frames/frame_0003.png", True),
    "render: the GIF": (["render"], f"renders/test_{STEP}/render.gif", True),
    "export: export/": (["export"], "export", False),
    "export: the scene file": (["export"], f"export/{STEP}.ply", True),
}


def plant_victim(folder: Path) -> Path:
    for name in PRECIOUS:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(f"someone's {name}\n".encode())
    return folder


def copy_run(trained: Path, target: Path) -> Path:
    shutil.copytree(trained, target)
    return target


@pytest.mark.parametrize("case", sorted(LINKS))
def test_commands_refuse_a_link_at_every_level_they_write(tmp_path, trained, case):
    command, planted, is_file = LINKS[case]
    run = copy_run(trained, tmp_path / "run")
    victim = plant_victim(tmp_path / "elsewhere")
    link = run / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim / "precious.bin" if is_file else victim, target_is_directory=not is_file)
    before, outside = files_of(run), files_of(victim)
    result = run_cli(command[0], str(run), *command[1:])
    assert_one_line_error(result, str(link), "symbolic link")
    assert files_of(victim) == outside
    assert files_of(run) == before and link.is_symlink()


def test_render_refuses_a_link_below_the_folder_given_with_out(tmp_path, trained):
    victim = plant_victim(tmp_path / "elsewhere")
    out = tmp_path / "out"
    out.mkdir()
    (out / "depth").symlink_to(victim, target_is_directory=True)
    outside = files_of(victim)
    assert_one_line_error(run_cli("render", str(trained), "--out", str(out)), str(out / "depth"), "symbolic link")
    assert files_of(victim) == outside and not (out / "frames").exists()


def test_commands_write_by_default_only_into_a_run(tmp_path, trained):
    """A checkpoint lying in a folder that holds no run is read, but written beside only with --out."""
    loose = tmp_path / "downloads"
    loose.mkdir()
    shutil.copy(trained / "ckpt" / "last.pt", loose / "scene.pt")
    (loose / "holiday.jpg").write_bytes(b"someone's photo")
    before = files_of(loose)
    for command in ("eval", "render", "export"):
        assert_one_line_error(run_cli(command, str(loose / "scene.pt")), str(loose), "no splattrain run", "--out")
        assert files_of(loose) == before and sorted(p.name for p in loose.iterdir()) == ["holiday.jpg", "scene.pt"]
    result = run_cli("export", str(loose / "scene.pt"), "--out", str(tmp_path / "scene.ply"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_viewer_snapshot_is_never_written_through_a_link(tmp_path):
    from splattrain.files import NotARegularFileError
    from splattrain.viewer.service import ViewService

    victim = plant_victim(tmp_path / "elsewhere")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "viewer").symlink_to(victim, target_is_directory=True)
    outside = files_of(victim)
    server = SimpleNamespace(notify=lambda *a: None, offer_download=lambda *a: None)
    service = ViewService(server, None, None, tmp_path / "run" / "viewer")  # type: ignore[arg-type]
    request = SimpleNamespace(mode="rgb", client_id=1)
    with pytest.raises(NotARegularFileError, match="symbolic link"):
        service._save_png(request, np.zeros((4, 4, 3), dtype=np.uint8))
    assert files_of(victim) == outside
    (tmp_path / "run" / "viewer").unlink()
    service._save_png(request, np.zeros((4, 4, 3), dtype=np.uint8))
    assert len(list((tmp_path / "run" / "viewer").glob("view_*_rgb.png"))) == 1


@pytest.mark.parametrize("place, where", [(".", "the current folder"), ("..", "a folder above the current one"),
                                          ("/", "the root folder")])
def test_fit_refuses_an_output_dir_holding_the_current_folder_before_anything_moves(tmp_path, place, where):
    work = tmp_path / "parent" / "work"
    write_config(work, tmp_path / "unused")
    (tmp_path / "parent" / "notes.txt").write_text("someone's notes\n")
    before, root = files_of(tmp_path), sorted(os.listdir("/"))
    result = run_cli("fit", "--config", "cfg.yaml", f"output_dir={place}", "--overwrite", cwd=work)
    assert_one_line_error(result, f"output_dir '{place}'", where)
    assert files_of(tmp_path) == before and sorted(os.listdir("/")) == root
    assert sorted(p.name for p in (tmp_path / "parent").iterdir()) == ["notes.txt", "work"]


def test_fit_refuses_a_checkpoint_dir_that_is_root_a_users_folder_or_a_file(tmp_path):
    mine = tmp_path / "mine"
    (mine / "chapter").mkdir(parents=True)
    (mine / "thesis.tex").write_text("someone's thesis\n")
    (mine / "chapter" / "one.tex").write_text("someone's chapter\n")
    (tmp_path / "notes.txt").write_text("someone's notes\n")
    config = write_config(tmp_path, tmp_path / "run")
    (tmp_path / "work").mkdir()
    before, root = files_of(tmp_path), sorted(os.listdir("/"))
    for folder, fragments in [("/", ["the root folder"]), (str(mine), ["holds no splattrain checkpoint", "'thesis.tex'"]),
                              (str(tmp_path / "notes.txt"), ["is a file"]), (str(tmp_path), ["a folder above"])]:
        result = run_cli("fit", "--config", str(config), f"checkpoint_dir={folder}", cwd=tmp_path / "work")
        assert_one_line_error(result, f"checkpoint_dir '{folder}'", *fragments)
        assert files_of(tmp_path) == before and sorted(os.listdir("/")) == root, folder
        assert not (tmp_path / "run").exists()
    (tmp_path / "empty").mkdir()  # an empty folder, or one holding a run's checkpoints, is the run's to use
    result = run_cli("fit", "--config", str(config), f"checkpoint_dir={tmp_path / 'empty'}", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "empty" / "last.pt").is_file()


def test_commands_read_a_runs_own_checkpoint_dir(tmp_path):
    start = tmp_path / "project"
    config = write_config(start, Path("runs") / "a")  # both folders relative to where the run started
    result = run_cli("fit", "--config", str(config), "checkpoint_dir=weights/a", "--quiet", cwd=start)
    assert result.returncode == 0, result.stdout + result.stderr
    run = start / "runs" / "a"
    assert (start / "weights" / "a" / "last.pt").is_file() and not (run / "ckpt").exists()
    for command in (["eval"], ["render", "--path", "orbit", "--frames", "2"], ["export"]):
        result = run_cli(command[0], str(run), *command[1:], cwd=REPO)
        assert result.returncode == 0, result.stdout + result.stderr
    assert (run / "eval" / STEP / "metrics.json").is_file() and (run / "export" / f"{STEP}.ply").is_file()
    assert (run / "renders" / f"orbit_{STEP}" / "frames" / "frame_0001.png").is_file()


def test_render_says_how_much_it_writes_before_it_renders(tmp_path, trained):
    result = run_cli("render", str(trained), "--path", "orbit", "--frames", "3", "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    (estimate,) = [i for i, line in enumerate(lines) if "at most about" in line and "on disk" in line]
    (wrote,) = [i for i, line in enumerate(lines) if line.startswith("wrote 3 frames")]
    assert estimate < wrote and "rendering 3 frames" in lines[estimate]


def test_render_keeps_no_frame_in_memory_and_builds_the_animation_from_the_files(tmp_path, trained, monkeypatch):
    import splattrain.commands.render as render_module
    from splattrain.console import Console

    alive, seen = [], []
    to_uint8 = render_module.to_uint8

    def tracked(image):
        seen.append(sum(ref() is not None for ref in alive))  # frames rendered before and still held
        out = to_uint8(image)
        alive.append(weakref.ref(out))
        return out

    monkeypatch.setattr(render_module, "to_uint8", tracked)
    result = render_module.render(trained, Console(quiet=True), path="orbit", frames=12, out=tmp_path / "a", depth="none")
    assert result["frames"] == 12 and max(seen) <= 1, seen
    pngs = sorted((tmp_path / "a" / "frames").glob("frame_*.png"))
    with Image.open(tmp_path / "a" / "render.gif") as gif:
        assert gif.n_frames == 12
        gif.seek(5)
        shown = np.asarray(gif.convert("RGB"))
    expected = np.asarray(Image.open(pngs[5]).convert("RGB").quantize().convert("RGB"))
    assert np.abs(shown.astype(int) - expected.astype(int)).mean() < 8  # the GIF's frame is the PNG's


def test_render_leaves_out_a_gif_above_its_stated_size(tmp_path, trained, monkeypatch):
    from rich.console import Console as RichConsole

    import splattrain.commands.render as render_module
    from splattrain.console import Console

    monkeypatch.setattr(render_module, "GIF_MAX_BYTES", 16 * 16 * 2)  # room for two 16x16 frames
    terminal = io.StringIO()
    result = render_module.render(trained, Console(terminal=RichConsole(file=terminal, width=400)), path="orbit",
                                  frames=3, out=tmp_path / "b", depth="none")
    assert "gif" not in result and not (tmp_path / "b" / "render.gif").exists()
    assert len(list((tmp_path / "b" / "frames").glob("frame_*.png"))) == 3
    assert "no GIF" in terminal.getvalue() and "the frames and MP4 only" in terminal.getvalue()
