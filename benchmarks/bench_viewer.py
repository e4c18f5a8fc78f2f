"""What the browser viewer costs training: no viewer, the viewer with no browser, and the viewer
with a browser (headless Chromium on this machine) at default settings.

Runs the demo scene (configs/demo.yaml, no validation, no checkpoints, no writers) for
``--steps`` steps in each setting, ``--rounds`` times interleaved, in one process, and prints
the median steps per second of each and its ratio to no viewer. It also prints the viewer
hook's own time per step (its after_train_iter, from the per-hook timing) as a share of
training time: the steadiest figure of the no-browser overhead on a busy machine.

    python benchmarks/bench_viewer.py [--steps 300] [--rounds 3] [--no-browser] [option=value ...]

Options (``refresh=1.0``, ``train_share=0.95``) set the viewer hook's options in the viewer runs.

The browser run needs Debian's chromium and chromium-driver and selenium (see docs/viewer.md).
The browser draws the page with SwiftShader on the CPU, so on a small machine it competes with
training for cores; a browser on another machine (ssh -L) costs the training machine only the
renders and their transfer.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import sys
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from splattrain.config import load_config  # noqa: E402
from splattrain.console import Console  # noqa: E402
from splattrain.engine import DefaultTrainer  # noqa: E402
from splattrain.hooks import Hook, ViewerHook  # noqa: E402


VIEWER_OPTIONS: List[str] = []  # viewer hook options from the command line


def build(steps: int, viewer: bool) -> DefaultTrainer:
    overrides = [f"trainer.max_steps={steps}", "trainer.val_interval=0", "writers=[]", "default_hooks.checkpoint=null",
                 f"output_dir={tempfile.mkdtemp(prefix='splattrain-bench-viewer-')}", "metrics.lpips=false"]
    if viewer:
        overrides += ["default_hooks.viewer.port=0"] + VIEWER_OPTIONS
    return DefaultTrainer(load_config(REPO / "configs" / "demo.yaml", overrides), console=Console(quiet=True))


def run(steps: int, setting: str) -> Dict[str, float]:
    trainer = build(steps, setting != "none")
    viewer = next((h for h in trainer.hooks.hooks if isinstance(h, ViewerHook)), None)
    browser = None
    cpu: List[float] = []  # the browser's CPU seconds when training starts and ends
    if setting == "browser":
        from browser import Browser

        class Open(Hook):
            """Opens the page once the server is up, before the first step; reads the browser's CPU time."""

            def before_train(self, trainer) -> None:
                nonlocal browser
                browser = Browser()
                browser.open(viewer.server.url)
                deadline = time.monotonic() + 30
                while viewer.server.num_clients == 0 and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(3.0)  # page fully drawn before training starts
                cpu.append(browser.cpu_seconds())

            def after_train(self, trainer) -> None:
                cpu.append(browser.cpu_seconds())

        trainer.register_hook(Open())
    try:
        results = trainer.train()
    finally:
        if browser is not None:
            browser.close()
    seconds = float(results["train_seconds"])
    per_step = trainer.hooks.seconds.get(("viewer", "after_train_iter"), 0.0)
    out = {"rate": steps / seconds, "viewer_share": per_step / seconds, "viewer_us": 1e6 * per_step / steps}
    if viewer is not None:
        out["renders"] = float(viewer.service.renders)
        out["images"] = float(viewer.service.images_sent)
        out["render_share"] = viewer.service.render_seconds / seconds
    if len(cpu) == 2:
        out["browser_cores"] = (cpu[1] - cpu[0]) / seconds
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-browser", action="store_true", help="skip the run with a browser")
    parser.add_argument("options", nargs="*", help="viewer hook options (refresh=1.0, train_share=0.95, ...)")
    args = parser.parse_args()
    VIEWER_OPTIONS.extend(f"default_hooks.viewer.{o}" for o in args.options)
    settings = ["none", "no_client"] + ([] if args.no_browser else ["browser"])
    measured: Dict[str, List[Dict[str, float]]] = {s: [] for s in settings}
    run(50, "none")  # warm up: compile, caches
    for _ in range(args.rounds):
        for setting in settings:
            measured[setting].append(run(args.steps, setting))
    base = statistics.median(m["rate"] for m in measured["none"])
    print(f"demo scene, {args.steps} steps x {args.rounds} rounds, median steps/s (ratio to no viewer)")
    for setting in settings:
        rate = statistics.median(m["rate"] for m in measured[setting])
        line = f"  {setting:10s} {rate:8.1f} steps/s  ({rate / base:6.3f})"
        if setting != "none":
            share = statistics.median(m["viewer_share"] for m in measured[setting])
            micros = statistics.median(m["viewer_us"] for m in measured[setting])
            line += f"  viewer hook {micros:.0f} us/step = {100 * share:.3f}% of training time"
        if setting == "browser":
            median = {key: statistics.median(m[key] for m in measured[setting])
                      for key in ("renders", "images", "render_share", "browser_cores")}
            line += (f", {median['renders']:.0f} renders ({100 * median['render_share']:.1f}% of training time), "
                     f"{median['images']:.0f} images sent; the browser used {median['browser_cores']:.2f} cores")
        print(line)


if __name__ == "__main__":
    main()
