"""Which device the warehouse holds benchmark rows for: the folder of each, and naming a trace's
GPU the way `lumos opbench import` named the rows (imports neither pandas nor pyarrow)."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["device_key", "find_device", "opbench_dir", "stored_devices"]


def opbench_dir(warehouse: Path, device: str) -> Path:
    """Where a device's benchmark rows live (the one place that knows this path)."""
    from warehouse.layout import encode_job

    return Path(warehouse) / "opbench" / f"device={encode_job(device)}"


def device_key(name: str) -> str:
    """A device name reduced to what identifies the part: lower case, letters and digits only,
    the vendor prefix dropped (`NVIDIA A100-SXM4-80GB`, a trace's `deviceProperties` name, and
    `NVIDIAA100-SXM4-80GB`, a benchmark file's, both give `a100sxm480gb`)."""
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    for vendor in ("nvidia", "amd"):
        key = key.removeprefix(vendor)
    return key


def stored_devices(warehouse: Path) -> list[str]:
    """The devices the warehouse holds benchmark rows for, by the names they were imported as."""
    from warehouse.layout import decode_job

    root = Path(warehouse) / "opbench"
    found = sorted(root.glob("device=*")) if root.is_dir() else []
    return [decode_job(d.name.removeprefix("device=")) for d in found]


def find_device(warehouse: Path, name: str | None) -> str | None:
    """The stored device that is the GPU named `name`: its imported name, or the GPU its files
    were named for (`<GPU>_<operator>_...`), is the same part by `device_key`; None when none
    is. Reads directory and file names only."""
    want = device_key(name or "")
    if not want:
        return None
    for device in stored_devices(warehouse):
        gpus = {p.stem.split("_", 1)[0] for p in opbench_dir(warehouse, device).glob("*.parquet")}
        if want in {device_key(device), *map(device_key, gpus)}:
            return device
    return None
