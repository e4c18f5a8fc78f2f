"""The initial scales' nearest-neighbour distances: the k-d tree and the direct path (compiled and
PyTorch) against brute force, and the two direct paths bit for bit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch

from splattrain import interrupts
from splattrain.kernels.build import load_library
from splattrain.model import neighbours
from splattrain.model.neighbours import knn_memory_bytes, mean_knn_distance


def brute_force(points: torch.Tensor, k: int) -> torch.Tensor:
    d2 = torch.cdist(points.double(), points.double()).square()
    nearest = d2.topk(k + 1, dim=1, largest=False).values[:, 1:]
    return nearest.mean(dim=1).sqrt()


@pytest.fixture(params=["direct", "direct-torch", "tree"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs once through each path (the tree: no set is small enough for the direct one;
    direct-torch: as without the compiled library)."""
    monkeypatch.setattr(neighbours, "DIRECT_MAX", 0 if request.param == "tree" else 10**9)
    if request.param == "direct":
        load_library()
    if request.param == "direct-torch":
        monkeypatch.setattr(neighbours, "cached_library", lambda: None)
    return request.param


@pytest.mark.parametrize("k", [1, 3, 8])
def test_matches_brute_force_on_clustered_points(k: int, path: str) -> None:
    generator = torch.Generator().manual_seed(k)
    centres = torch.randn(20, 3, generator=generator) * 5
    points = centres[torch.randint(0, 20, (3000,), generator=generator)]
    points = points + torch.randn(3000, 3, generator=generator) * torch.rand(3000, 1, generator=generator)
    got = mean_knn_distance(points, k=k)
    assert got.dtype == points.dtype and got.shape == (3000,)
    torch.testing.assert_close(got.double(), brute_force(points, k), rtol=1e-5, atol=1e-7)


def test_duplicates_small_sets_and_chunks(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    monkeypatch.setattr(neighbours, "QUERY_CHUNK", 7)  # many chunks: each row lands in its place
    monkeypatch.setattr(neighbours, "DIRECT_BLOCK", 7)
    points = torch.tensor([[0.0, 0, 0], [0, 0, 0], [1, 0, 0], [0, 2, 0], [5, 5, 5]] * 5)
    torch.testing.assert_close(mean_knn_distance(points, k=3).double(), brute_force(points, 3))
    assert mean_knn_distance(points[:1]).tolist() == [1.0]
    torch.testing.assert_close(mean_knn_distance(points[2:4], k=3), torch.full((2,), 5 ** 0.5))


def test_a_stop_signal_is_acted_on_between_chunks(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    monkeypatch.setattr(neighbours, "QUERY_CHUNK", 100)
    monkeypatch.setattr(neighbours, "DIRECT_BLOCK", 100)
    interrupts.defer()
    try:
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(interrupts.Interrupted):
            mean_knn_distance(torch.rand(1000, 3))
    finally:
        interrupts.restore()


def test_a_few_thousand_points_never_load_scipy() -> None:
    """The demo's 5,000 starting points take the direct path: scipy's import is start-up time."""
    code = ("import sys, torch; from splattrain.model.neighbours import mean_knn_distance; "
            "mean_knn_distance(torch.rand(5000, 3)); print('scipy.spatial' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_memory_estimate_follows_the_path() -> None:
    """A million points are estimated as the tree they use (tens of MB), not as a million-wide
    block of distances."""
    assert knn_memory_bytes(5000) == 1024 * 5000 * 16
    assert knn_memory_bytes(1_000_000) < 100 * 2**20


@pytest.mark.parametrize("n, k", [(5000, 3), (1001, 3), (300, 2), (40, 1)])
def test_the_compiled_direct_path_gives_the_pytorch_values_bit_for_bit(n: int, k: int) -> None:
    """The compiled library replaces the PyTorch comparison when it is at hand; the starting
    scales (and so every run) must not change with it."""
    generator = torch.Generator().manual_seed(n)
    points = (torch.rand(n, 3, generator=generator) * 2.6 - 1.3).double()
    points[10:13] = points[13]  # duplicates: each other's neighbours at distance 0
    handle = load_library().handle
    compiled = neighbours._direct_compiled(handle, points, k)
    assert (compiled == neighbours._direct_torch(points, k)).all()


def test_more_neighbours_than_the_kernel_averages_take_the_pytorch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    load_library()
    compiled = neighbours._direct_compiled
    called = []
    monkeypatch.setattr(neighbours, "_direct_compiled", lambda *args: called.append(args) or compiled(*args))
    points = torch.rand(100, 3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(mean_knn_distance(points, k=4).double(), brute_force(points, 4), rtol=1e-5, atol=1e-7)
    assert called == []
    mean_knn_distance(points, k=3)
    assert len(called) == 1
