"""Every script under benchmarks/ starts: its imports resolve and ``--help`` prints its usage
without training anything (the benchmarks run for minutes and are not part of the suite). A
module the scripts share (no ``__main__`` block) loads and does nothing."""

from __future__ import annotations

import importlib.util
import json
import resource
import runpy
import sys
from pathlib import Path

import pytest
import torch

from conftest import needs_shared
from lego_views import LEGO, lego_subset

BENCHMARKS = sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=[path.stem for path in BENCHMARKS])
def test_a_benchmark_prints_its_usage(script: Path, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    monkeypatch.syspath_prepend(str(script.parent))
    if 'if __name__ == "__main__":' in script.read_text():
        with pytest.raises(SystemExit) as exit_:
            runpy.run_path(str(script), run_name="__main__")
        assert exit_.value.code in (0, None)
        assert capsys.readouterr().out.startswith("usage:")
    else:
        runpy.run_path(str(script), run_name=script.stem)
        assert capsys.readouterr().out == ""
    assert not list(tmp_path.iterdir())  # nothing written


def _bench(name: str):
    """A benchmark script as a module (its ``main`` called with arguments)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS[0].parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY_LEGO = ["--steps", "12", "--ladder", "4", "8", "--views", "2", "data.downscale=16",
             "model.init.num_points=500", "metrics.lpips=false"]


@needs_shared(LEGO)
def test_the_lego_ladder_runs_straight_and_in_parts(tmp_path, capsys):
    bench = _bench("bench_blender")
    scene = lego_subset(tmp_path / "lego", train=[0, 1, 2], test=[0, 50, 100, 150])
    assert bench.main(["--scene", str(scene), "--out", str(tmp_path / "straight"), *TINY_LEGO]) == 0
    straight = json.loads((tmp_path / "straight" / "lego" / "ladder.json").read_text())
    said = capsys.readouterr().out
    assert "lego: final, every test view: PSNR" in said and "35.78 dB  not reached" in said

    parts = ["--scene", str(scene), "--out", str(tmp_path / "parts"), *TINY_LEGO]
    assert bench.main([*parts, "--stop-at", "8"]) == 0
    assert "lego: stopped after step 8; go on with --resume" in capsys.readouterr().out
    first = json.loads((tmp_path / "parts" / "lego" / "ladder.json").read_text())
    assert not first["finished"] and [r["step"] for r in first["ladder"]] == [4, 8]
    assert bench.main([*parts, "--resume"]) == 0
    resumed = json.loads((tmp_path / "parts" / "lego" / "ladder.json").read_text())

    assert straight["finished"] and resumed["finished"]
    assert [r["step"] for r in resumed["ladder"]] == [4, 8, 12]
    assert [r["views"] for r in resumed["ladder"]] == [2, 2, 4]  # the last figure: every test view
    assert resumed["ladder"][:2] == first["ladder"]  # the first part's records, from its checkpoint
    for ours, theirs in zip(resumed["ladder"], straight["ladder"]):  # the run's exact resume
        assert ours["psnr"] == pytest.approx(theirs["psnr"], abs=1e-5)
        assert ours["gaussians"] == theirs["gaussians"]
    before, last = first["ladder"][-1], resumed["ladder"][-1]
    assert last["train_seconds"] > before["train_seconds"] and last["wall_seconds"] > before["wall_seconds"]
    assert last["ssim"] is not None and last["lpips"] is None
    # each record: the process's peak resident memory by then, as the kernel counts it
    assert 0 < last["peak_rss_mib"] <= round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    assert bench.main([*parts, "--resume"]) == 0  # finished: reported as it stands
    assert json.loads((tmp_path / "parts" / "lego" / "ladder.json").read_text()) == resumed
    assert "time to quality" in capsys.readouterr().out


@needs_shared(LEGO)
def test_the_lego_step_is_timed_by_stage_for_each_count(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS[0].parent))  # its helper module bench_rasterizer
    bench = _bench("bench_cpu_stages")
    scene = lego_subset(tmp_path / "lego", train=[5, 6], test=[0])
    bench.main(["--lego", "--data", str(scene), "--gaussians", "300", "700", "--repeats", "1", "--isa", "baseline",
                "data.downscale=16"])
    said = capsys.readouterr().out
    headers = [line for line in said.splitlines() if line.startswith("torch ")]
    assert len(headers) == 2 and all("blender.yaml scene, 50x50" in line for line in headers)
    assert "300 Gaussians (random init)" in headers[0] and "700 Gaussians (random init)" in headers[1]
    steps = [float(line.split()[-1]) for line in said.splitlines() if line.strip().startswith("whole step")]
    assert len(steps) == 2 and all(ms > 0 for ms in steps)


def test_the_compositing_work_counts_every_pixel_gaussian_pair_within_reach(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS[0].parent))
    bench = _bench("bench_cpu_stages")
    from splattrain.render import cpu_rasterizer as cpu

    generator = torch.Generator().manual_seed(3)
    width, height, n = 45, 37, 60
    means2d = torch.rand(1, n, 2, generator=generator) * torch.tensor([width, height]) * 1.2 - 3
    scale = 0.5 + 3 * torch.rand(1, n, 2, generator=generator)
    conics = torch.stack([1 / scale[..., 0] ** 2, 0.2 * torch.rand(1, n, generator=generator) / scale.prod(-1),
                          1 / scale[..., 1] ** 2], dim=-1)
    opacities = 0.05 + 0.9 * torch.rand(1, n, generator=generator)
    a, b, c = conics.unbind(-1)  # the covariance's largest eigenvalue sets the reach: 3.5 of its deviations
    det = a * c - b * b
    largest = 0.5 * (a + c) / det + ((0.5 * (a - c) / det) ** 2 + (b / det) ** 2).sqrt()
    radii = (3.5 * largest.sqrt()).ceil().int()[..., None].expand(1, n, 2)
    depths = torch.rand(1, n, generator=generator) + 1
    isects = cpu.intersect_tiles(means2d, radii, depths, width, height, 16, conics, opacities)

    class Projection:
        pass

    proj = Projection()
    proj.means2d, proj.conics, proj.opacities = means2d, conics, opacities
    everything = torch.full((height, width), isects.flatten_ids.numel())
    total, reached, in_front = bench.pair_counts(proj, isects, everything, width, height, chunk=7)
    # every pixel against every Gaussian, without the tiles
    ys, xs = torch.meshgrid(torch.arange(height) + 0.5, torch.arange(width) + 0.5, indexing="ij")
    dx, dy = xs[..., None] - means2d[0, :, 0], ys[..., None] - means2d[0, :, 1]
    sigma = 0.5 * (conics[0, :, 0] * dx * dx + conics[0, :, 2] * dy * dy) + conics[0, :, 1] * dx * dy
    brute = int(((sigma >= 0) & (opacities[0] * torch.exp(-sigma) >= 1 / 255)).sum())
    assert total == isects.flatten_ids.numel() and reached == in_front == brute > 0
    nothing = torch.full((height, width), -1)
    assert bench.pair_counts(proj, isects, nothing, width, height)[2] == 0
