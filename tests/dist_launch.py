"""Helpers for the distributed tests: torchrun on loopback with gloo, and the runs they compare."""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import torch

from conftest import DEMO
from splattrain.checkpoints.files import load_checkpoint_file

#: Densification every 10 steps from step 10 and an opacity reset at step 30: both happen in 36 steps.
#: Per-view appearance and poses are learned too (their gradients are averaged like the Gaussians').
SCENE = """
name: tiny
output_dir: {out}
seed: 7
data:
  path: {demo}
  downscale: 4
trainer:
  max_steps: 36
  val_interval: 0
  batch_size: 1
model:
  sh_degree: 1
  sh_degree_interval: 20
  init:
    num_points: 300
strategy:
  refine_start_iter: 10
  refine_every: 10
  reset_every: 30
appearance:
  type: affine
pose_opt:
  type: se3
  start: 0.0
metrics:
  lpips: false
writers:
  - type: csv
default_hooks:
  logger:
    interval: 1
  checkpoint:
    interval: 18
"""


def write_config(folder: Path) -> Path:
    path = folder / "cfg.yaml"
    path.write_text(SCENE.format(out=folder / "unset", demo=DEMO))
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_command(config: Path, overrides: List[str], nproc: int = 2, port: Optional[int] = None,
                     node: Optional[tuple[int, int]] = None) -> List[str]:
    """``torchrun ... -m splattrain fit`` on 127.0.0.1 (``node``: (node_rank, nnodes) for c10d rendezvous)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc)]
    port = port or free_port()
    if node is None:
        command += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
    else:
        command += ["--nnodes", str(node[1]), "--node-rank", str(node[0]), "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "splattrain-test", "--local-addr", "127.0.0.1"]
    return command + ["-m", "splattrain", "fit", "--config", str(config), "--quiet", *overrides]


def environment() -> Dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return env


def run_torchrun(config: Path, overrides: List[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(torchrun_command(config, overrides, **kwargs), env=environment(), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def gaussian_counts(run_dir: Path) -> Dict[int, int]:
    """train/num_gaussians per step from the run's scalars.csv."""
    with open(run_dir / "scalars.csv", newline="") as handle:
        return {int(row[0]): int(float(row[2])) for row in csv.reader(handle) if row[1] == "train/num_gaussians"}


def gaussians(checkpoint: Path) -> Dict[str, torch.Tensor]:
    return load_checkpoint_file(checkpoint)["gaussians"]


def view_corrections(checkpoint: Path) -> Dict[str, torch.Tensor]:
    """The learned per-view appearance and pose parameters, by name."""
    state = load_checkpoint_file(checkpoint)["view_opt"]
    return {f"{name}.{key}": value for name, part in state.items() for key, value in part["module"].items()}
