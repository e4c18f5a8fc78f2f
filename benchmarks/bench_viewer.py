"""What the browser viewer costs training: no viewer, the viewer with no browser, and the viewer
with a browser (headless Chromium on this machine, its camera still) at default settings.

Runs the demo scene (configs/demo.yaml, no validation, no checkpoints, no writers) for
``--steps`` steps in each setting, ``--rounds`` times interleaved, in one process, and prints
the median steps per second of each and its ratio to no viewer. It also prints the viewer
hook's own time per step (its after_train_iter, from the per-hook timing) as a share of
training time: the steadiest figure of the no-browser overhead on a busy machine. With a
browser it prints the renders, the images sent, and the CPU the browser used while training
(in cores: its CPU seconds over the training seconds).

    python benchmarks/bench_viewer.py [--steps 1500] [--rounds 2] [--no-browser] [option=value ...]
                                      [--variant option=value[,option=value]] ...

Options (``refresh=10``, ``train_share=0.95``) set the viewer hook's options in every viewer run;
each ``--variant`` adds a browser run with those options on top (``--variant refresh=0.2``
measures the earlier default in the same rounds).

The browser run needs Debian's chromium and chromium-driver and selenium (see docs/viewer.md).
The browser draws the page with SwiftShader on the CPU, so on a small machine it competes with
training for cores; a browser on another machine (ssh -L) costs the training machine only the
renders and their transfer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from splattrain.cli import GOMP_SPINCOUNT  # noqa: E402

os.environ.setdefault("GOMP_SPINCOUNT", GOMP_SPINCOUNT)  # as the command line sets it, before torch loads

from splattrain.engine import load_config  # noqa: E402
from splattrain.console import Console  # noqa: E402
from splattrain.engine import DefaultTrainer  # noqa: E402
from splattrain.hooks import Hook, ViewerHook  # noqa: E402

SETTLE_SECONDS = 3.0  # the page is fully drawn before training starts


def build(steps: int, viewer_options: Sequence[str] | None) -> DefaultTrainer:
    overrides = [f"trainer.max_steps={steps}", "trainer.val_interval=0", "writers=[]", "default_hooks.checkpoint=null",
                 f"output_dir={tempfile.mkdtemp(prefix='splattrain-bench-viewer-')}", "metrics.lpips=false"]
    if viewer_options is not None:
        overrides += ["default_hooks.viewer.port=0"] + [f"default_hooks.viewer.{o}" for o in viewer_options]
    return DefaultTrainer(load_config(REPO / "configs" / "demo.yaml", overrides), console=Console(quiet=True))


class OpenBrowser(Hook):
    """Opens the page once the server is up, before the first step; reads the browser's CPU time
    when training starts and ends."""

    def __init__(self, viewer: ViewerHook) -> None:
        super().__init__()
        self.viewer = viewer
        self.browser = None
        self.cpu: List[float] = []

    def before_train(self, trainer) -> None:
        from browser import Browser

        self.browser = Browser()
        self.browser.open(self.viewer.server.url)
        deadline = time.monotonic() + 30
        while self.viewer.server.num_clients == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(SETTLE_SECONDS)
        self.cpu.append(self.browser.cpu_seconds())

    def after_train(self, trainer) -> None:
        self.cpu.append(self.browser.cpu_seconds())


def run(steps: int, viewer_options: Sequence[str] | None, browser: bool) -> Dict[str, float]:
    trainer = build(steps, viewer_options)
    viewer = next((h for h in trainer.hooks.hooks if isinstance(h, ViewerHook)), None)
    opener = OpenBrowser(viewer) if browser else None
    if opener is not None:
        trainer.register_hook(opener)
    try:
        results = trainer.train()
    finally:
        if opener is not None and opener.browser is not None:
            opener.browser.close()
    seconds = float(results["train_seconds"])
    per_step = trainer.hooks.seconds.get(("viewer", "after_train_iter"), 0.0)
    out = {"rate": steps / seconds, "viewer_share": per_step / seconds, "viewer_us": 1e6 * per_step / steps}
    if viewer is not None:
        out["renders"] = float(viewer.service.renders)
        out["images"] = float(viewer.service.images_sent)
        out["render_share"] = viewer.service.render_seconds / seconds
    if opener is not None:
        out["browser_cores"] = (opener.cpu[1] - opener.cpu[0]) / seconds
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-browser", action="store_true", help="skip the runs with a browser")
    parser.add_argument("--variant", action="append", default=[],
                        help="another browser run with these viewer options (comma-separated option=value)")
    parser.add_argument("options", nargs="*", help="viewer hook options for every viewer run (refresh=10, ...)")
    args = parser.parse_args()
    # name -> (viewer options or None for no viewer, with a browser)
    settings = {"no viewer": (None, False), "viewer, no browser": (args.options, False)}
    if not args.no_browser:
        settings["browser"] = (args.options, True)
        for variant in args.variant:
            settings[f"browser, {variant}"] = (args.options + variant.split(","), True)
    measured: Dict[str, List[Dict[str, float]]] = {name: [] for name in settings}
    run(50, None, False)  # warm up: compile, caches
    for _ in range(args.rounds):
        for name, (options, browser) in settings.items():
            measured[name].append(run(args.steps, options, browser))
    median = {name: {key: statistics.median(m[key] for m in runs) for key in runs[0]} for name, runs in measured.items()}
    base = median["no viewer"]["rate"]
    shown = " ".join(args.options) or "defaults"
    print(f"demo scene, {args.steps} steps x {args.rounds} rounds, viewer {shown}; "
          f"median steps/s (ratio to no viewer)")
    for name, m in median.items():
        line = f"  {name:24s} {m['rate']:8.1f} steps/s  ({m['rate'] / base:6.3f})"
        if name != "no viewer":
            line += f"  viewer hook {m['viewer_us']:.0f} us/step = {100 * m['viewer_share']:.3f}% of training time"
        if "browser_cores" in m:
            line += (f", {m['renders']:.0f} renders ({100 * m['render_share']:.1f}% of training time), "
                     f"{m['images']:.0f} images sent; the browser used {m['browser_cores']:.2f} cores")
        print(line)


if __name__ == "__main__":
    main()
