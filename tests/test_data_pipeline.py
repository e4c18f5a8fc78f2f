"""The data pipeline: uint8 storage, prefetching, resumable view order, backgrounds, masks in loss and metrics."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from pytorch_msssim import ssim

from splattrain.cameras import Camera
from splattrain.data.images import parallel_map
from splattrain.data.pipeline import DataPipeline, _to_float, _to_float_host
from splattrain.data.types import Frame, SceneData
from splattrain.errors import DataError
from splattrain.losses import photometric_loss, ssim_map, ssim_nhwc
from splattrain.metrics import Evaluator, psnr

WHITE = torch.ones(3)


def scene(n: int = 5, channels: int = 3, masks: bool = False) -> SceneData:
    rng = np.random.default_rng(0)
    frames = []
    for k in range(n):
        image = rng.integers(0, 256, (12, 16, channels), dtype=np.uint8)
        mask = (np.arange(16)[None, :] >= k).repeat(12, axis=0) if masks and k % 2 == 0 else None
        camera = Camera(torch.eye(4), torch.eye(3), 16, 12, f"v{k}")
        frames.append(Frame(image=image, camera=camera, name=f"v{k}", mask=mask))
    return SceneData(train=frames, test=frames[:2], extra={"world_transform": np.diag([2.0, 2.0, 2.0, 1.0])})


def served(pipeline: DataPipeline, steps: range) -> list[tuple[int, list[float]]]:
    return [(int(b["image_id"][0]), b["background"].tolist()) for b in (pipeline.next_train(s) for s in steps)]


def test_images_are_shared_not_copied_and_converted_per_batch() -> None:
    data = scene()
    pipeline = DataPipeline(data, WHITE, torch.device("cpu"), prefetch=False)
    assert all(a.image is b.image for a, b in zip(pipeline.train_frames, data.train))
    batch = pipeline.next_train(1)
    index = int(batch["image_id"][0])
    assert batch["image"].dtype == torch.float32 and batch["image"].shape == (1, 12, 16, 3)
    np.testing.assert_allclose(batch["image"][0].numpy(), data.train[index].image / 255.0, atol=1e-7)
    assert "mask" not in batch and "alpha" not in batch
    torch.testing.assert_close(pipeline.state_dict()["world_transform"], torch.tensor(np.diag([2.0, 2.0, 2.0, 1.0])))


@pytest.mark.parametrize("random_background", [False, True])
def test_prefetching_serves_the_same_batches_and_resumes_exactly(random_background: bool) -> None:
    def make(prefetch: bool) -> DataPipeline:
        return DataPipeline(
            scene(), WHITE, torch.device("cpu"), seed=3, random_background=random_background, prefetch=prefetch
        )

    plain, ahead = make(False), make(True)
    assert served(plain, range(1, 13)) == served(ahead, range(1, 13))
    state = ahead.state_dict()
    expected = served(ahead, range(13, 25))
    assert served(plain, range(13, 25)) == expected
    for prefetch in (False, True):
        resumed = make(prefetch)
        resumed.next_train(1)  # a prefetched batch in flight must be dropped by load_state_dict
        resumed.load_state_dict(state)
        assert served(resumed, range(13, 25)) == expected
    ahead.close()


def test_host_conversion_matches_the_pytorch_conversion_exactly() -> None:
    rng = np.random.default_rng(2)
    for channels in (3, 4):
        image = rng.integers(0, 256, (2, 9, 7, channels), dtype=np.uint8)
        background = torch.rand(3, generator=torch.Generator().manual_seed(channels))
        rgb, alpha = _to_float(torch.from_numpy(image), background)
        host_rgb, host_alpha = _to_float_host(image, background.numpy())
        assert host_rgb.dtype == np.float32
        assert torch.equal(torch.from_numpy(host_rgb), rgb)
        if channels == 4:
            assert torch.equal(torch.from_numpy(host_alpha), alpha)
        else:
            assert alpha is None and host_alpha is None


def _thread_ids() -> set:
    return set(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts the process's threads in Linux /proc")
def test_prefetch_thread_starts_no_second_openmp_team() -> None:
    """A PyTorch kernel on the prefetch thread would give it an OpenMP team of its own; with
    more OpenMP threads than cores every PyTorch operation of the loop then waits for wake-ups."""
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        (torch.rand(1 << 17) * 2).sum()  # the main thread's team exists before counting
        rng = np.random.default_rng(0)
        frames = [
            Frame(rng.integers(0, 256, (128, 128, 4), dtype=np.uint8), Camera(torch.eye(4), torch.eye(3), 128, 128, f"v{k}"), f"v{k}")
            for k in range(3)
        ]
        before = _thread_ids()
        pipeline = DataPipeline(SceneData(train=frames, test=frames[:1]), WHITE, torch.device("cpu"), prefetch=True)
        for step in range(1, 5):
            assert pipeline.next_train(step)["image"].shape == (1, 128, 128, 3)
        started = _thread_ids() - before  # threads of earlier tests may end meanwhile: count new ones
        assert len(started) == 1  # the prefetch thread alone
        pipeline.close()
    finally:
        torch.set_num_threads(previous)


def test_random_background_is_composited_and_rendered_with() -> None:
    data = scene(channels=4)
    for frame in data.train:
        frame.image[0, 0, 3] = 0  # a fully transparent pixel shows the background
    pipeline = DataPipeline(data, WHITE, torch.device("cpu"), seed=1, random_background=True)
    backgrounds = []
    for step in range(1, 6):
        batch = pipeline.next_train(step)
        torch.testing.assert_close(batch["image"][0, 0, 0], batch["background"])
        assert batch["alpha"].shape == (1, 12, 16, 1)
        backgrounds.append(batch["background"])
    assert len({tuple(b.tolist()) for b in backgrounds}) == 5
    for batch in pipeline.test_batches():
        torch.testing.assert_close(batch["image"][0, 0, 0], WHITE)


def test_masks_reach_the_batch_of_views_that_have_one() -> None:
    pipeline = DataPipeline(scene(masks=True), WHITE, torch.device("cpu"), prefetch=False)
    for step in range(1, 6):
        batch = pipeline.next_train(step)
        index = int(batch["image_id"][0])
        assert ("mask" in batch) == (index % 2 == 0)
        if index % 2 == 0:
            assert batch["mask"].dtype == torch.bool and batch["mask"].shape == (1, 12, 16, 1)
            assert int((~batch["mask"]).sum()) == 12 * index


def test_masked_pixels_count_in_neither_loss_nor_gradient() -> None:
    torch.manual_seed(0)
    target = torch.rand(1, 24, 32, 3)
    mask = torch.zeros(1, 24, 32, 1, dtype=torch.bool)
    mask[:, :, :20] = True
    pred = target.clone() + 0.05 * torch.randn_like(target)
    other = pred.clone()
    other[:, :, 20:] = torch.rand(1, 24, 12, 3)  # change only excluded pixels
    a, b = photometric_loss(pred, target, mask=mask), photometric_loss(other, target, mask=mask)
    for key in ("l1", "dssim", "loss"):
        torch.testing.assert_close(a[key], b[key])
    expected_l1 = (pred - target)[:, :, :20].abs().mean()
    torch.testing.assert_close(a["l1"], expected_l1)
    pred.requires_grad_(True)
    photometric_loss(pred, target, mask=mask)["loss"].backward()
    assert pred.grad[:, :, 20:].abs().sum() == 0 and pred.grad[:, :, :20].abs().sum() > 0
    # An all-True mask is the unmasked loss.
    full = torch.ones_like(mask)
    torch.testing.assert_close(
        photometric_loss(other, target, mask=full)["loss"], photometric_loss(other, target)["loss"]
    )


def test_masked_metrics_ignore_excluded_pixels() -> None:
    torch.manual_seed(1)
    target = torch.rand(1, 24, 32, 3)
    pred = (target + 0.02 * torch.randn_like(target)).clamp(0, 1)
    mask = torch.ones(1, 24, 32, 1, dtype=torch.bool)
    mask[:, :, 25:] = False
    ruined = pred.clone()
    ruined[:, :, 25:] = 1.0 - target[:, :, 25:]
    evaluator = Evaluator(lpips=False, lpips_net="alex", device=torch.device("cpu"), warn=lambda _: None)
    clean, broken = evaluator(pred, target, mask), evaluator(ruined, target, mask)
    assert clean["psnr"] == pytest.approx(broken["psnr"]) and clean["ssim"] == pytest.approx(broken["ssim"])
    assert clean["psnr"] == pytest.approx(psnr(pred[:, :, :25], target[:, :, :25]), rel=1e-5)
    assert evaluator(ruined, target)["psnr"] < clean["psnr"] - 5
    assert float(ssim_map(pred, target).mean()) == pytest.approx(float(ssim_nhwc(pred, target)), abs=1e-6)
    small, full = pred[:, :8, :9], torch.ones(1, 8, 9, 1, dtype=torch.bool)  # sides shorter than the window
    with pytest.warns(UserWarning):  # pytorch_msssim says it skips the blur
        expected = float(ssim(small.permute(0, 3, 1, 2), target[:, :8, :9].permute(0, 3, 1, 2), data_range=1.0))
    assert evaluator(small, target[:, :8, :9], full)["ssim"] == pytest.approx(expected, abs=1e-6)


def test_parallel_decoding_keeps_order_and_reports_the_first_failure() -> None:
    assert parallel_map(lambda x: x * x, list(range(20)), workers=4) == [x * x for x in range(20)]

    def fail_on_odd(x: int) -> int:
        if x % 2:
            raise DataError(f"item {x}")
        return x

    with pytest.raises(DataError, match="item 1"):
        parallel_map(fail_on_odd, list(range(10)), workers=3)
