"""MemoryBudgetHook on a real CPU run: the process's peak resident memory stays under a budget
set just above the warm-up peak, which the same run without a budget exceeds."""

from __future__ import annotations

import json
import mmap
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

from conftest import DEMO, REPO
from splattrain.hooks.memory_budget import peak_resident_bytes, reset_peak_resident

MARGIN_MB = 30.0


def fit(tmp_path: Path, name: str, max_memory_gb: float) -> Dict[str, float]:
    """Train with fast densification in a fresh process (its own peak RSS); the last value of
    every scalar its jsonl writer saw."""
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"""
name: {name}
output_dir: {tmp_path / name}
data: {{path: {DEMO}, downscale: 4}}
trainer: {{max_steps: 60, val_interval: 0}}
renderer: {{type: torch}}
model: {{sh_degree: 3, init: {{num_points: 1000}}}}
metrics: {{lpips: false}}
strategy: {{refine_start_iter: 5, refine_every: 10, grow_grad2d: 1.0e-7, reset_every: 100000}}
writers: [{{type: jsonl}}]
default_hooks: {{checkpoint: null}}
custom_hooks:
  - {{type: MemoryBudgetHook, max_memory: {max_memory_gb}, warmup_steps: 30, debug_freq: 10,
     strategy: conservative}}
""")
    result = subprocess.run([sys.executable, "-m", "splattrain", "fit", "--config", str(cfg), "--quiet"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    scalars: Dict[str, float] = {}
    for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines():
        scalars.update(json.loads(line))
    return scalars


@pytest.mark.slow  # two whole runs measured against a memory limit
def test_budget_just_above_the_warmup_peak_holds_where_an_unbudgeted_run_exceeds_it(tmp_path):
    free = fit(tmp_path, "free", max_memory_gb=100.0)
    budget_mb = free["memory/warmup_peak_mb"] + MARGIN_MB
    assert free["memory/run_peak_mb"] > budget_mb + MARGIN_MB, free  # growth after the warm-up
    capped = fit(tmp_path, "capped", max_memory_gb=budget_mb / 1024)
    assert abs(capped["memory/warmup_peak_mb"] - free["memory/warmup_peak_mb"]) < MARGIN_MB / 3, (capped, free)
    assert capped["memory/run_peak_mb"] <= budget_mb, (capped, budget_mb)
    assert capped["train/num_gaussians"] <= capped["memory/cap"] < free["train/num_gaussians"]


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="restarting the peak needs Linux's /proc")
def test_the_resident_peak_restarts_so_setup_transients_do_not_count():
    assert reset_peak_resident()
    before = peak_resident_bytes()
    size = 64 * 1024 * 1024
    block = mmap.mmap(-1, size)  # fresh pages from the system, not memory the allocator kept resident
    for offset in range(0, size, mmap.PAGESIZE):
        block[offset] = 1  # touched
    assert peak_resident_bytes() >= before + 60 * 1024 * 1024
    block.close()
    assert reset_peak_resident()
    assert peak_resident_bytes() < before + 16 * 1024 * 1024
