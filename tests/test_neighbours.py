"""The initial scales' nearest-neighbour distances: the compiled k-d tree, scipy's and the PyTorch
comparison against brute force, and the compiled tree against the PyTorch comparison bit for bit."""

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


@pytest.fixture(params=["compiled", "direct-torch", "scipy"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs once through each path (direct-torch and scipy: as without the compiled
    library, for a small set and for one too large to compare directly)."""
    if request.param == "compiled":
        load_library()
    else:
        monkeypatch.setattr(neighbours, "cached_library", lambda: None)
        monkeypatch.setattr(neighbours, "DIRECT_MAX", 0 if request.param == "scipy" else 10**9)
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


def test_with_the_library_scipy_is_never_loaded() -> None:
    """Twenty thousand points (past the direct comparison's reach) take the compiled tree: scipy's
    import is start-up time. Without the library, a few thousand points are compared directly."""
    code = ("import sys, torch; from splattrain.kernels.build import load_library; "
            "from splattrain.model import neighbours; "
            "neighbours.cached_library = lambda: None; neighbours.mean_knn_distance(torch.rand(5000, 3)); "
            "print('scipy.spatial' in sys.modules); "
            "neighbours.cached_library = load_library; neighbours.mean_knn_distance(torch.rand(20000, 3)); "
            "print('scipy.spatial' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


def test_the_memory_estimate_follows_the_path() -> None:
    """A million points are estimated as the tree they use (tens of MB), not as a million-wide
    block of distances."""
    assert knn_memory_bytes(5000) == 1024 * 5000 * 16
    assert knn_memory_bytes(1_000_000) < 100 * 2**20


def surface_points(n: int, seed: int) -> torch.Tensor:
    """Points as a sparse model has them: on a surface (a sphere's), with duplicates and a few far
    outliers."""
    generator = torch.Generator().manual_seed(seed)
    points = torch.nn.functional.normalize(torch.randn(n, 3, generator=generator, dtype=torch.float64), dim=1)
    points[: n // 100] *= 1 + 50 * torch.rand(n // 100, 1, generator=generator, dtype=torch.float64)
    points[10:13] = points[13]  # duplicates: each other's neighbours at distance 0
    return points


@pytest.mark.parametrize("n, k", [(5000, 3), (1001, 3), (300, 2), (40, 1)])
def test_the_compiled_tree_gives_the_pytorch_values_bit_for_bit(n: int, k: int) -> None:
    """The compiled tree replaces the PyTorch comparison when the library is at hand; the demo's
    starting scales (and so its runs) must not change with it."""
    generator = torch.Generator().manual_seed(n)
    points = (torch.rand(n, 3, generator=generator) * 2.6 - 1.3).double()
    points[10:13] = points[13]  # duplicates: each other's neighbours at distance 0
    compiled = neighbours._tree_compiled(load_library().handle, points, k)
    assert (compiled == neighbours._direct_torch(points, k)).all()


def test_the_compiled_tree_on_a_surface_with_outliers() -> None:
    """Points as a sparse model has them: on a surface (a sphere's), with duplicates, one point
    repeated fifty times and far outliers. The tree finds every point's true nearest distances
    (PyTorch's vectorised roots differ from the correctly rounded ones in the last bit at most)."""
    generator = torch.Generator().manual_seed(0)
    points = torch.nn.functional.normalize(torch.randn(12000, 3, generator=generator, dtype=torch.float64), dim=1)
    points[:120] *= 1 + 50 * torch.rand(120, 1, generator=generator, dtype=torch.float64)
    points[200:250] = points[250]
    compiled = neighbours._tree_compiled(load_library().handle, points, 3)
    expected = neighbours._direct_torch(points, 3)
    assert compiled[200] == 0.0 and (compiled[200:251] == 0.0).all()
    torch.testing.assert_close(torch.from_numpy(compiled), torch.from_numpy(expected), rtol=1e-15, atol=0)


def test_more_neighbours_than_the_kernel_averages_take_the_pytorch_path(monkeypatch: pytest.MonkeyPatch) -> None:
    load_library()
    compiled = neighbours._tree_compiled
    called = []
    monkeypatch.setattr(neighbours, "_tree_compiled", lambda *args: called.append(args) or compiled(*args))
    points = torch.rand(100, 3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(mean_knn_distance(points, k=4).double(), brute_force(points, 4), rtol=1e-5, atol=1e-7)
    assert called == []
    mean_knn_distance(points, k=3)
    assert len(called) == 1
