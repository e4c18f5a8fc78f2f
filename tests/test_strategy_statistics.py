"""The default strategy's per-step statistics: the compiled pass and the PyTorch path agree."""

import pytest
import torch

from splattrain.kernels import load_library
from splattrain.strategy import statistics


def _inputs(seed: int, n_cams: int = 2, n: int = 3001):
    gen = torch.Generator().manual_seed(seed)
    grads = torch.randn(n_cams, n, 2, generator=gen) * 1e-4
    radii = torch.randint(-1, 6, (n_cams, n, 2), generator=gen, dtype=torch.int32).clamp_min(0)
    return grads, radii


def _state(n: int, track: bool):
    gen = torch.Generator().manual_seed(3)
    state = {"grad2d": torch.rand(n, generator=gen), "count": torch.randint(0, 5, (n,), generator=gen).float()}
    if track:
        state["radii"] = torch.rand(n, generator=gen) * 0.05
    return state


@pytest.mark.parametrize("track", [False, True])
def test_compiled_statistics_match_the_torch_path(track: bool):
    grads, radii = _inputs(7)
    expected = _state(grads.shape[1], track)
    statistics._accumulate_torch(expected, grads, radii, 64.0 * 2, 48.0 * 2, 128.0, track)
    load_library()
    got = _state(grads.shape[1], track)
    assert statistics._accumulate_compiled(got, grads, radii, 64.0 * 2, 48.0 * 2, 128.0, track)
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=1e-6, atol=0, msg=key)
    seen = (radii > 0).all(-1)
    assert torch.equal(got["count"] - _state(grads.shape[1], track)["count"], seen.sum(0).float())
    if track:  # the largest radius over both cameras, not the last camera's
        largest = torch.where(seen, radii.max(-1).values, 0).max(0).values.float() / 128.0
        assert torch.equal(got["radii"], torch.maximum(_state(grads.shape[1], track)["radii"], largest))


def test_packed_rows_add_up_like_dense_ones():
    grads, radii = _inputs(9, n_cams=1, n=500)
    dense = _state(500, True)
    statistics._accumulate_torch(dense, grads, radii, 10.0, 10.0, 20.0, True)
    seen = (radii[0] > 0).all(-1)
    ids = torch.where(seen)[0]
    packed = _state(500, True)
    statistics.accumulate_packed(packed, grads[0][seen], radii[0][seen], ids, 20, 20, 1, True)
    for key in dense:
        assert torch.equal(packed[key], dense[key]), key
