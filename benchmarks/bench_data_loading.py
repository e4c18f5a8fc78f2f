"""Dataset loading speed and memory, and the data time per training step.

    python benchmarks/bench_data_loading.py [--images 200] [--size 1920x1080] [--folder DIR] [--steps 60]

1. Writes a COLMAP scene of generated JPEG photos (kept in --folder, default
   outputs/bench_data/colmap_<N>_<W>x<H>, and reused on later runs).
2. In fresh processes, decodes every image with Pillow serially (the baseline), then loads
   the scene with splattrain on one thread and on the default number of threads. Prints
   the load time and the resident memory the images take against their raw uint8 size.
3. Trains the demo scene for --steps steps with and without prefetching and prints the
   time per step spent waiting for data.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def rss_bytes() -> int:
    """Resident memory of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def generate_scene(folder: Path, count: int, width: int, height: int) -> None:
    """A COLMAP scene: ``count`` JPEG photos of smooth colour fields with fine noise, one PINHOLE camera."""
    from PIL import Image

    from splattrain.data.colmap_model import ColmapCamera, ColmapImage
    from splattrain.data.colmap_write import write_model

    if (folder / "sparse" / "0" / "images.bin").is_file() and len(list((folder / "images").glob("*.jpg"))) == count:
        return
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    images = []
    for k in range(count):
        phase = rng.uniform(0, 2 * np.pi, 3)
        rgb = np.stack([np.sin(x / (90 + 20 * c) + y / (140 - 15 * c) + phase[c]) for c in range(3)], axis=-1)
        rgb = 127.5 + 100 * rgb + rng.normal(0, 12, (height, width, 1)).astype(np.float32)
        Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).save(folder / "images" / f"{k:05d}.jpg", quality=90)
        angle = 2 * np.pi * k / count
        viewmat = np.eye(4)
        viewmat[:3, :3] = [[np.cos(angle), 0, -np.sin(angle)], [0, 1, 0], [np.sin(angle), 0, np.cos(angle)]]
        viewmat[:3, 3] = [0, 0, 4]
        images.append(ColmapImage.from_viewmat(k + 1, f"{k:05d}.jpg", 1, viewmat))
    camera = ColmapCamera(1, "PINHOLE", width, height, (0.8 * width, 0.8 * width, width / 2, height / 2))
    points = rng.normal(size=(1000, 3))
    write_model(folder / "sparse" / "0", [camera], images, points, rng.integers(0, 256, (1000, 3), dtype=np.uint8))


def measure(folder: str, how: str) -> dict:
    """Run in a fresh process: load the images ``how`` and report seconds and memory."""
    import torch  # noqa: F401  (imported before the baseline so its memory is not counted)
    from PIL import Image

    import splattrain.data.colmap  # noqa: F401  (module imports are not part of the load)
    from splattrain.config.schema import DataConfig
    from splattrain.data.loading import load_scene

    files = sorted((Path(folder) / "images").glob("*.jpg"))
    before = rss_bytes()
    start = time.perf_counter()
    if how == "pillow-serial":
        arrays = []
        for path in files:
            with Image.open(path) as image:
                arrays.append(np.asarray(image.convert("RGB")))
        raw = sum(a.nbytes for a in arrays)
    else:
        workers = 1 if how == "splattrain-1-thread" else 0
        _, scene = load_scene(DataConfig(path=folder, type="colmap", test_every=0, num_workers=workers))
        raw = sum(f.image.nbytes for f in scene.train + scene.test)
    seconds = time.perf_counter() - start
    return {
        "how": how,
        "seconds": seconds,
        "images": len(files),
        "raw": raw,
        "resident": rss_bytes() - before,
        "peak": peak_rss_bytes() - before,
    }


def data_time_per_step(steps: int, prefetch: bool) -> dict:
    """Train the demo scene and time the trainer's calls to ``data.next_train``."""
    from splattrain.engine import load_config
    from splattrain.console import Console
    from splattrain.engine import DefaultTrainer

    overrides = [
        f"trainer.max_steps={steps}",
        "trainer.val_interval=0",
        "writers=[]",
        f"data.prefetch={prefetch}",
        f"output_dir={REPO / 'outputs' / 'bench_data' / 'demo_run'}",
        "metrics.lpips=false",
    ]
    trainer = DefaultTrainer(load_config(REPO / "configs" / "demo.yaml", overrides), console=Console(quiet=True))
    waits: list[float] = []
    steps_s: list[float] = []
    next_train, train_step = trainer.data.next_train, trainer.train_step

    def timed_data(step: int):
        start = time.perf_counter()
        batch = next_train(step)
        waits.append(time.perf_counter() - start)
        return batch

    def timed_step(step: int):
        start = time.perf_counter()
        outputs = train_step(step)
        steps_s.append(time.perf_counter() - start)
        return outputs

    trainer.data.next_train = timed_data  # type: ignore[method-assign]
    trainer.train_step = timed_step  # type: ignore[method-assign]
    trainer.train()
    return {
        "prefetch": prefetch,
        "data_ms": 1000 * float(np.median(waits)),
        "step_ms": 1000 * float(np.median(steps_s)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--size", default="1920x1080", help="WIDTHxHEIGHT of the generated photos")
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--steps", type=int, default=60, help="demo training steps for the data-time measurement")
    parser.add_argument("--measure", nargs=2, metavar=("FOLDER", "HOW"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure)))
        return
    width, height = (int(v) for v in args.size.lower().split("x"))
    folder = args.folder or REPO / "outputs" / "bench_data" / f"colmap_{args.images}_{width}x{height}"
    start = time.perf_counter()
    generate_scene(folder, args.images, width, height)
    ready = time.perf_counter() - start
    print(f"scene          {folder} ({args.images} JPEGs at {width}x{height}; ready in {ready:.1f} s)")
    baseline = None
    for how in ("pillow-serial", "splattrain-1-thread", "splattrain-threads"):
        out = subprocess.run(
            [sys.executable, __file__, "--measure", str(folder), how], check=True, capture_output=True, text=True
        )
        r = json.loads(out.stdout)
        baseline = baseline or r["seconds"]
        print(
            f"{how:22s} {r['seconds']:6.2f} s  {r['images'] / r['seconds']:6.1f} images/s  "
            f"{baseline / r['seconds']:4.2f}x Pillow serial  resident {r['resident'] / 2**20:7.0f} MiB "
            f"= {r['resident'] / r['raw']:4.2f}x raw uint8 ({r['raw'] / 2**20:.0f} MiB)  "
            f"peak +{r['peak'] / 2**20:.0f} MiB"
        )
    data_time_per_step(10, True)  # warm-up: the first run in a process is slower throughout
    for prefetch in (False, True):
        r = data_time_per_step(args.steps, prefetch)
        print(
            f"demo data time prefetch={str(prefetch):5s}  {r['data_ms']:6.3f} ms/step waiting for data (median; "
            f"median step {r['step_ms']:.1f} ms)"
        )


if __name__ == "__main__":
    main()
