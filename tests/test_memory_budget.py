"""MemoryBudgetHook keeps a CPU run's peak memory under a budget an unbudgeted run exceeds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import DEMO, REPO


def run(tmp_path: Path, name: str, max_memory_gb: float) -> dict:
    """Train with fast, unconditional densification in a fresh process; return its memory scalars."""
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(f"""
name: {name}
output_dir: {tmp_path / name}
data: {{path: {DEMO}, downscale: 4}}
trainer: {{max_steps: 60, val_interval: 0, hook_timing: false}}
renderer: {{type: torch}}  # no extension build or load inside the measured process
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
    merged: dict = {}
    for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines():
        merged.update(json.loads(line))
    return merged


def test_budget_just_above_warmup_peak_is_respected(tmp_path):
    free = run(tmp_path, "free", max_memory_gb=100.0)
    warmup, peak = free["memory/warmup_peak_mb"], free["memory/run_peak_mb"]
    assert peak > warmup + 50, (warmup, peak)  # densification keeps adding memory after warm-up
    budget_mb = warmup + 0.5 * (peak - warmup)  # above the warm-up peak, well below the free peak
    capped = run(tmp_path, "capped", max_memory_gb=budget_mb / 1024)
    assert capped["memory/run_peak_mb"] < budget_mb < peak
    assert capped["train/num_gaussians"] < free["train/num_gaussians"]
    assert capped["memory/cap"] == capped["train/num_gaussians"]
