"""PLY layout and atomic writes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from splattrain.io.atomic import atomic_link, atomic_torch_save, atomic_write_bytes
from splattrain.io.ply import ply_property_names, write_ply


def read_ply(path):
    """Minimal independent binary PLY reader: header names and a float32 matrix."""
    raw = path.read_bytes()
    end = raw.index(b"end_header\n") + len(b"end_header\n")
    header = raw[:end].decode("ascii").splitlines()
    assert header[:2] == ["ply", "format binary_little_endian 1.0"]
    count = int(header[2].split()[-1])
    names = [line.split()[-1] for line in header if line.startswith("property float ")]
    data = np.frombuffer(raw[end:], dtype="<f4").reshape(count, len(names))
    return names, data


def test_ply_matches_3dgs_layout(tmp_path):
    n, k = 5, 16
    g = torch.Generator().manual_seed(0)
    params = {
        "means": torch.randn(n, 3, generator=g),
        "scales": torch.randn(n, 3, generator=g),
        "quats": torch.randn(n, 4, generator=g),
        "opacities": torch.randn(n, generator=g),
        "sh0": torch.randn(n, 1, 3, generator=g),
        "shN": torch.randn(n, k - 1, 3, generator=g),
    }
    path = tmp_path / "scene.ply"
    write_ply(path, params)
    names, data = read_ply(path)
    assert names == ply_property_names(k - 1)
    assert names[:9] == ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
    assert names[-8:] == ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    assert len(names) == 62
    col = {name: data[:, i] for i, name in enumerate(names)}
    np.testing.assert_array_equal(col["y"], params["means"][:, 1].numpy())
    np.testing.assert_array_equal(col["f_dc_2"], params["sh0"][:, 0, 2].numpy())
    # f_rest is channel-major: the first 15 are red, coefficient 1..15
    np.testing.assert_array_equal(col["f_rest_0"], params["shN"][:, 0, 0].numpy())
    np.testing.assert_array_equal(col["f_rest_14"], params["shN"][:, 14, 0].numpy())
    np.testing.assert_array_equal(col["f_rest_15"], params["shN"][:, 0, 1].numpy())
    np.testing.assert_array_equal(col["opacity"], params["opacities"].numpy())
    np.testing.assert_array_equal(col["scale_2"], params["scales"][:, 2].numpy())
    np.testing.assert_array_equal(col["rot_0"], params["quats"][:, 0].numpy())
    assert not col["nx"].any()


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    path = tmp_path / "ckpt.pt"
    atomic_torch_save({"a": 1}, path)

    def broken(handle):
        handle.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write_bytes(path, broken)
    assert torch.load(path) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_atomic_link_points_at_complete_copy(tmp_path):
    source = tmp_path / "step_000010.pt"
    atomic_torch_save({"step": 10}, source)
    atomic_link(source, tmp_path / "last.pt")
    atomic_torch_save({"step": 20}, tmp_path / "step_000020.pt")
    atomic_link(tmp_path / "step_000020.pt", tmp_path / "last.pt")
    assert torch.load(tmp_path / "last.pt") == {"step": 20}
    assert torch.load(source) == {"step": 10}


def test_an_image_sent_to_two_writers_is_encoded_once(monkeypatch):
    """png_bytes keeps the last image's bytes: the same pixels (another array, or floats that round
    to them) are not encoded again; changed pixels, even in the same array, are."""
    import numpy as np
    from PIL import Image

    from splattrain.io import png

    saves = []
    original = Image.Image.save
    monkeypatch.setattr(Image.Image, "save", lambda self, *a, **k: saves.append(1) or original(self, *a, **k))
    image = np.random.default_rng(0).integers(0, 256, (8, 12, 3), dtype=np.uint8)
    first = png.png_bytes(image)
    assert png.png_bytes(image.copy()) == first and png.png_bytes(image.astype(np.float32) / 255.0) == first
    assert len(saves) == 1
    image[0, 0] = 255 - image[0, 0]  # changed in place
    second = png.png_bytes(image)
    assert second != first and len(saves) == 2
    assert np.array_equal(np.asarray(Image.open(__import__("io").BytesIO(second))), image)
