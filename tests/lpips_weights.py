"""Random LPIPS weight files in the layouts splattrain reads (torchvision's and the lpips package's)."""

from __future__ import annotations

from pathlib import Path

import torch

#: torchvision's conv layers in ``features`` per backbone: index -> (out, in, kernel).
TORCHVISION_CONVS = {
    "alex": {0: (64, 3, 11), 3: (192, 64, 5), 6: (384, 192, 3), 8: (256, 384, 3), 10: (256, 256, 3)},
    "vgg": {
        0: (64, 3, 3), 2: (64, 64, 3), 5: (128, 64, 3), 7: (128, 128, 3), 10: (256, 128, 3), 12: (256, 256, 3),
        14: (256, 256, 3), 17: (512, 256, 3), 19: (512, 512, 3), 21: (512, 512, 3), 24: (512, 512, 3),
        26: (512, 512, 3), 28: (512, 512, 3),
    },
}
#: The lpips package's linear-layer inputs per backbone.
LINEAR_CHANNELS = {"alex": [64, 192, 384, 256, 256], "vgg": [64, 128, 256, 512, 512]}
FILES = {"alex": "alexnet-owt-7be5be79.pth", "vgg": "vgg16-397923af.pth"}


def backbone_state(net: str, seed: int = 0) -> dict:
    """Random weights under torchvision's key names and shapes (plus a classifier key LPIPS ignores)."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for index, (cout, cin, k) in TORCHVISION_CONVS[net].items():
        state[f"features.{index}.weight"] = torch.randn(cout, cin, k, k, generator=g) * (2.0 / (cin * k * k)) ** 0.5
        state[f"features.{index}.bias"] = torch.randn(cout, generator=g) * 0.05
    state["classifier.6.bias"] = torch.zeros(1000)
    return state


def linear_state(net: str, seed: int = 1) -> dict:
    """Random non-negative linear layers under the lpips package's key names (lin<k>.model.1.weight)."""
    g = torch.Generator().manual_seed(seed)
    return {f"lin{k}.model.1.weight": torch.rand(1, c, 1, 1, generator=g) for k, c in enumerate(LINEAR_CHANNELS[net])}


def write_weights(folder: Path, net: str = "alex", backbone: bool = True, linear: bool = True) -> Path:
    """Write ``net``'s files into ``folder`` as a user would lay them out for metrics.lpips_weights."""
    folder.mkdir(parents=True, exist_ok=True)
    if backbone:
        torch.save(backbone_state(net), folder / FILES[net])
    if linear:
        torch.save(linear_state(net), folder / f"{net}.pth")
    return folder


def write_inflating_backbone(path: Path, net: str = "alex", inflated: int = 256 * 2**20) -> None:
    """``net``'s backbone file as a torch zip whose first tensor holds ``inflated`` bytes of zeros
    in a deflated member: a file of about ``inflated / 1000`` bytes that loading inflates."""
    import zipfile

    state = backbone_state(net)
    state["features.0.weight"] = torch.zeros(inflated // 4)
    stored = path.with_name("archive.stored")  # torch names the archive folder after the file
    torch.save(state, stored)
    del state
    with zipfile.ZipFile(stored) as source, zipfile.ZipFile(path, "w") as out:
        members = source.infolist()
        largest = max(members, key=lambda member: member.file_size)
        for member in members:
            if member is largest:
                info = zipfile.ZipInfo(member.filename)
                info.compress_type = zipfile.ZIP_DEFLATED
                with source.open(member) as data, out.open(info, "w", force_zip64=True) as packed:
                    for chunk in iter(lambda: data.read(2**20), b""):
                        packed.write(chunk)
            else:
                out.writestr(member, source.read(member))
    stored.unlink()
