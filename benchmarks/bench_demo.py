"""Train the demo scene end to end and print wall time and test metrics.

    python benchmarks/bench_demo.py [dotted.key=value ...]

Runs `splattrain fit --config configs/demo.yaml` in a subprocess (output in
outputs/bench_demo/, replaced each time), then prints the wall-clock time and results.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="dotted.key=value config overrides")
    args = parser.parse_args()
    out = REPO / "outputs" / "bench_demo"
    shutil.rmtree(out, ignore_errors=True)  # this benchmark's own run, replaced each time
    command = [sys.executable, "-m", "splattrain", "fit", "--config", str(REPO / "configs" / "demo.yaml"),
               f"output_dir={out}", *args.overrides]
    start = time.perf_counter()
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    results = json.loads((out / "results.json").read_text())
    print(f"wall time      {wall:8.1f} s (process start to exit)")
    print(f"train seconds  {results['train_seconds']:8.1f} s (training steps only)")
    print(f"steps          {results['steps']:8d}")
    print(f"gaussians      {results['num_gaussians']:8d}")
    print(f"test PSNR      {results['psnr']:8.2f} dB")
    print(f"test SSIM      {results['ssim']:8.4f}")
    print(f"test LPIPS     {results['lpips'] if results['lpips'] is None else round(results['lpips'], 4)}")


if __name__ == "__main__":
    main()
