"""Crafted checkpoints: every entry is checked before anything uses it, so export, eval and
--resume refuse a bad one in one line (exit code 2) naming the file and the entry."""

from __future__ import annotations

import copy
import io
import math
import resource
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
import torch

from cli_check import assert_one_line_error, run_cli, trained, write_config  # noqa: F401
from conftest import REPO
from splattrain.checkpoints.files import load_checkpoint_file, save_checkpoint_file

ADDRESS_SPACE = 1200 << 20


@pytest.fixture(scope="module")
def state(trained) -> Dict[str, Any]:
    return load_checkpoint_file(trained / "ckpt" / "last.pt")


def _crafted(tmp_path: Path, state: Dict[str, Any], change: Callable[[Dict[str, Any]], None]) -> Path:
    crafted = copy.deepcopy(state)
    change(crafted)
    path = tmp_path / "crafted.pt"
    save_checkpoint_file(crafted, path)
    return path


def _set(*keys: str, value: Any) -> Callable[[Dict[str, Any]], None]:
    def change(state: Dict[str, Any]) -> None:
        target = state
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value(target[keys[-1]]) if callable(value) else value
    return change


def _delete(*keys: str) -> Callable[[Dict[str, Any]], None]:
    def change(state: Dict[str, Any]) -> None:
        target = state
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]
    return change


SCENE_CASES = {
    "means shorter": (_set("gaussians", "means", value=lambda t: t[:-1]), "gaussians.scales"),
    "quats longer": (_set("gaussians", "quats", value=lambda t: torch.cat([t, t[:1]])), "gaussians.quats"),
    "integer scales": (_set("gaussians", "scales", value=lambda t: t.int()), "torch.int32"),
    "bool opacities": (_set("gaussians", "opacities", value=lambda t: t > 0), "torch.bool"),
    "complex sh0": (_set("gaussians", "sh0", value=lambda t: t.to(torch.complex64)), "torch.complex64"),
    "half means": (_set("gaussians", "means", value=lambda t: t.half()), "torch.float16"),
    "double shN": (_set("gaussians", "shN", value=lambda t: t.double()), "torch.float64"),
    "meta quats": (_set("gaussians", "quats", value=lambda t: torch.empty(t.shape, device="meta")), "meta"),
    "sparse means": (_set("gaussians", "means", value=lambda t: t.to_sparse()), "dense"),
    "1-D means": (_set("gaussians", "means", value=lambda t: t.reshape(-1)), "[N, 3]"),
    "NaN scales": (_set("gaussians", "scales", value=lambda t: t.index_fill(0, torch.tensor([0]), math.nan)), "NaN"),
    "missing quats": (_delete("gaussians", "quats"), "'gaussians' holds"),
    "list for a dict": (_set("gaussians", value=lambda g: list(g.values())), "not a dict of tensors"),
    "sh_degree three": (_set("sh_degree", value="three"), "'sh_degree' is 'three'"),
    "sh_degree wrong": (_set("sh_degree", value=2), "gaussians.shN"),
    "step abc": (_set("step", value="abc"), "'step' is 'abc'"),
    "step negative": (_set("step", value=-1), "'step' is -1"),
    "step past max_steps": (_set("step", value=10**12), "past its config's trainer.max_steps"),
    "world_transform 3x3": (_set("world_transform", value=torch.eye(3, dtype=torch.float64)), "[4, 4]"),
    "world_transform singular": (_set("world_transform", value=torch.diag(torch.tensor([1.0, 1.0, 0.0, 1.0],
                                                                                      dtype=torch.float64))), "singular"),
    "NaN background": (_set("config", "data", "background", value=[math.nan, 0.0, 0.0]), "data.background"),
    "config a list": (_set("config", value=[1, 2]), "'config' is a list"),
}


@pytest.mark.parametrize("case", sorted(SCENE_CASES))
def test_export_refuses_a_crafted_scene(tmp_path, state, case):
    change, expected = SCENE_CASES[case]
    crafted = _crafted(tmp_path, state, change)
    assert_one_line_error(run_cli("export", str(crafted), "--out", str(tmp_path / "x.ply")), str(crafted), expected)
    assert not (tmp_path / "x.ply").exists()


@pytest.mark.parametrize("command", ["eval", "render"])
def test_eval_and_render_share_the_checks(tmp_path, state, command):
    change, expected = SCENE_CASES["means shorter"]
    crafted = _crafted(tmp_path, state, change)
    assert_one_line_error(run_cli(command, str(crafted), "--out", str(tmp_path / "out")), str(crafted), expected)


RESUME_CASES = {
    "optimizer moment shape": (_set("optimizers", "means", "state", 0, "exp_avg", value=lambda t: t[:-1]),
                               "optimizers.means.state[0].exp_avg"),
    "optimizer groups": (_set("optimizers", "scales", "param_groups", value=lambda g: g + g), "parameter groups"),
    "optimizer missing": (_delete("optimizers", "sh0"), "'optimizers' holds"),
    "strategy shape": (_set("strategy_state", "grad2d", value=lambda t: torch.zeros(len(t) + 5)), "strategy_state.grad2d"),
    "strategy keys": (_delete("strategy_state", "count"), "'strategy_state' holds"),
    "torch rng": (_set("rng", "torch", value=torch.zeros(10, dtype=torch.uint8)), "rng.torch"),
    "python rng": (_set("rng", "python", value=[3, [1, 2], None]), "rng.python"),
    "numpy rng": (_set("rng", "numpy", value=lambda s: ["PCG64", *s[1:]]), "rng.numpy"),
    "data order": (_set("data", "order", value=[0, 999]), "data.order"),
    "data position": (_set("data", "position", value=99), "data.position"),
    "hook state": (_set("hooks", value={"logger": [1, 2]}), "'hooks'"),
    "hook weights": (_set("hooks", value=lambda h: {**h, "ema": {"averaged": {"means": torch.zeros(3, 3)}}}),
                     "hooks.ema.averaged.means"),
    "step past max_steps": (_set("step", value=5), "past its config's trainer.max_steps"),
}


@pytest.mark.parametrize("case", sorted(RESUME_CASES))
def test_resume_refuses_a_crafted_training_state(tmp_path, state, case):
    change, expected = RESUME_CASES[case]
    crafted = _crafted(tmp_path, state, change)
    run_dir = tmp_path / "run"
    config = write_config(tmp_path, run_dir)
    assert_one_line_error(run_cli("fit", "--config", str(config), "--resume", str(crafted)), str(crafted), expected)
    assert not run_dir.exists() or not (run_dir / "ckpt").exists()


def test_an_empty_scene_exports_to_valid_empty_files(tmp_path, state):
    crafted = _crafted(tmp_path, state, _set("gaussians", value=lambda g: {k: v[:0] for k, v in g.items()}))
    from splattrain.io.gaussians_file import read_gaussians_file

    for fmt, suffix in (("ply", "ply"), ("splat", "splat"), ("spz", "spz"), ("ply-compressed", "compressed.ply")):
        out = tmp_path / f"empty.{suffix}"
        result = run_cli("export", str(crafted), "--format", fmt, "--out", str(out))
        assert result.returncode == 0, result.stderr
        params, _ = read_gaussians_file(out)
        assert all(value.shape[0] == 0 for value in params.values()), fmt


def test_densification_that_prunes_everything_stops_in_one_line_and_keeps_the_last_good_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    config = write_config(tmp_path, run_dir, steps=6)
    result = run_cli("fit", "--config", str(config), "--quiet", "strategy.prune_opa=0.99", "strategy.refine_start_iter=1",
                     "strategy.refine_every=2", "strategy.reset_every=1000", "strategy.refine_stop_iter=4",
                     "default_hooks.checkpoint.interval=1")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    good = run_dir / "ckpt" / "step_000001.pt"
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("error: step 2: strategy 'default' pruned every Gaussian"), error
    assert f"its last checkpoint with Gaussians is {good}" in error, error
    assert sorted(p.name for p in (run_dir / "ckpt").iterdir()) == ["last.pt", "step_000001.pt"]  # no empty rescue
    assert load_checkpoint_file(run_dir / "ckpt" / "last.pt")["gaussians"]["means"].shape[0] == 100
    assert load_checkpoint_file(good)["step"] == 1


def test_pruning_everything_before_any_checkpoint_says_so(tmp_path):
    run_dir = tmp_path / "run"
    config = write_config(tmp_path, run_dir, steps=6)
    result = run_cli("fit", "--config", str(config), "--quiet", "strategy.prune_opa=0.99", "strategy.refine_start_iter=1",
                     "strategy.refine_every=2", "strategy.reset_every=1000", "strategy.refine_stop_iter=4")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith("no checkpoint was saved before it"), result.stderr
    assert not list((run_dir / "ckpt").glob("*.pt"))  # no rescue checkpoint of an empty model


# -- the torch zip around a checkpoint ----------------------------------------------------------
def test_compressed_zip_members_are_refused_before_loading(tmp_path, trained):
    """A checkpoint whose payload member is 1 GiB deflated into a few MB: it is refused from the zip
    directory, before torch inflates anything (the child has a few hundred MB)."""
    saved = io.BytesIO()
    torch.save({"format": "splattrain-checkpoint/2", "sha256": "0" * 64, "payload": torch.zeros(1, dtype=torch.uint8)},
               saved)
    bomb = tmp_path / "bomb.pt"
    zeros = bytes(1 << 24)
    with zipfile.ZipFile(saved) as source, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as target:
        for member in source.infolist():
            with target.open(member.filename, "w", force_zip64=True) as writer:
                if member.filename.endswith("/data/0"):  # the payload's storage, grown to 1 GiB
                    for _ in range((1 << 30) // len(zeros)):
                        writer.write(zeros)
                else:
                    writer.write(source.read(member))
    assert bomb.stat().st_size < 8 << 20

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    result = subprocess.run([sys.executable, "-m", "splattrain", "export", str(bomb), "--out", str(tmp_path / "x.ply")],
                            cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=cap)
    assert_one_line_error(result, str(bomb), "compressed member")


def _capped_export(checkpoint: Path, out: Path) -> subprocess.CompletedProcess:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    return subprocess.run([sys.executable, "-m", "splattrain", "export", str(checkpoint), "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, preexec_fn=cap)


def _repeated(state: Dict[str, Any]) -> None:  # 10^8 Gaussians from one stored number each: 2.4 GB to check
    state["gaussians"] = {k: torch.zeros((1,) * v.dim()).expand(10**8, *v.shape[1:]) for k, v in state["gaussians"].items()}


def _shared(state: Dict[str, Any]) -> None:  # one storage seen through 400 entries
    state["last_metrics"] = {f"copy{i}": state["gaussians"]["shN"] for i in range(400)}


@pytest.mark.parametrize("change, expected", [(_repeated, "repeats the 4 bytes"), (_shared, "views repeating")])
def test_tensors_that_repeat_their_storage_are_refused_before_anything_reads_them(tmp_path, state, change, expected):
    """Zero-stride expansions (a 50 KB file whose Gaussians take 2.4 GB once checked) and many views
    of one storage are refused from their sizes, before anything reads them (the child has 1.2 GB)."""
    crafted = _crafted(tmp_path, state, change)
    assert crafted.stat().st_size < 1 << 20
    assert_one_line_error(_capped_export(crafted, tmp_path / "x.ply"), str(crafted), expected)
    assert not (tmp_path / "x.ply").exists()


def test_a_payload_that_is_not_one_string_of_bytes_is_refused_before_hashing(tmp_path):
    """A header whose payload is one byte repeated 2^31 times: hashing it would read 2 GB."""
    crafted = tmp_path / "repeated.pt"
    torch.save({"format": "splattrain-checkpoint/2", "sha256": "0" * 64,
                "payload": torch.zeros(1, dtype=torch.uint8).expand(1 << 31)}, crafted)
    assert_one_line_error(_capped_export(crafted, tmp_path / "x.ply"), str(crafted), "not one string of bytes")


# -- nested data that would never end a walk --------------------------------------------------------
def _self_containing(state: Dict[str, Any]) -> None:  # l = []; l.append(l)
    loop: list = []
    loop.append(loop)
    state["last_metrics"] = {"history": loop}


def _doubling(state: Dict[str, Any]) -> None:  # 61 small lists that walk as 2^60 entries
    shared: list = [0]
    for _ in range(60):
        shared = [shared, shared]
    state["last_metrics"] = {"history": shared}


def _deep(state: Dict[str, Any]) -> None:  # 300 lists, each in the next
    deep: list = []
    for _ in range(300):
        deep = [deep]
    state["last_metrics"] = {"history": deep}


STRUCTURE_CASES = {"self-containing list": (_self_containing, "state.last_metrics.history contains itself"),
                   "doubling lists": (_doubling, "state holds more than 1,000,000 entries"),
                   "300 levels deep": (_deep, "is nested more than 64 levels deep")}
#: What the tests allow a refusal to take: seconds are promised; a loaded machine adds to them.
WALK_BOUND = 30.0


@pytest.mark.parametrize("command", ["export", "eval", "fit --resume"])
@pytest.mark.parametrize("case", sorted(STRUCTURE_CASES))
def test_nested_data_that_never_ends_a_walk_is_refused_within_seconds(tmp_path, state, case, command):
    import time

    change, expected = STRUCTURE_CASES[case]
    crafted = _crafted(tmp_path, state, change)
    assert crafted.stat().st_size < 1 << 20
    if command == "fit --resume":
        args = ("fit", "--config", str(write_config(tmp_path, tmp_path / "run")), "--resume", str(crafted))
    else:
        args = (command, str(crafted), "--out", str(tmp_path / "out"))
    started = time.monotonic()
    result = run_cli(*args, timeout=WALK_BOUND + 30)
    assert time.monotonic() - started < WALK_BOUND
    assert_one_line_error(result, str(crafted), expected)
    assert not (tmp_path / "out").exists() and not (tmp_path / "run" / "ckpt").exists()
