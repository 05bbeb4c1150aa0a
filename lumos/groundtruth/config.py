"""What one ground-truth run is: the model and parallel configuration, how it is measured, and the
grid file that lists many of them.

A grid file (YAML) holds an optional `control` (`RunControl`), an optional `base` (overrides of
the defaults), named `runs` and a `grid` (a product over base). Every run is `base` updated with
its own keys; a grid run is named from the keys it sets (`dp2_micro_batch4`). Names must be
unique: each becomes a job directory. An example: docs/groundtruth.md, "Module notes".
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PP_SCHEDULES = ("1f1b", "gpipe")
# how tensor parallelism is written: by hand, Megatron style (`parallel/tp.py`), or with
# PyTorch's own DTensor `parallelize_module` (`parallel/dtensor.py`)
TP_IMPLS = ("megatron", "dtensor")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class ConfigError(ValueError):
    """A configuration or grid file is invalid; the message names the file (if any) and the key."""


@dataclass(frozen=True)
class RunConfig:
    """One training configuration. Sizes are per model (not per rank); `ffn` 0 means 4 × hidden."""

    name: str = "base"
    layers: int = 2
    hidden: int = 64
    ffn: int = 0
    heads: int = 4
    seq: int = 32
    micro_batch: int = 2
    num_micro_batches: int = 1
    vocab: int = 256
    dp: int = 1
    pp: int = 1
    tp: int = 1
    pp_schedule: str = "1f1b"
    tp_impl: str = "megatron"
    seed: int = 0

    @property
    def ffn_size(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def world_size(self) -> int:
        return self.dp * self.pp * self.tp

    def validate(self, where: str = "configuration") -> RunConfig:
        """Raise `ConfigError` naming `where` and the key when the run cannot be built."""
        ints = [f.name for f in dataclasses.fields(self) if f.type in ("int", int)]
        for key in ints:
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{where}: {key} must be an integer, got {value!r}")
            if value < (0 if key in ("ffn", "seed") else 1):
                raise ConfigError(f"{where}: {key} must be positive, got {value}")
        if not _NAME_RE.match(self.name):
            raise ConfigError(f"{where}: name {self.name!r} is not a safe directory name")
        if self.pp_schedule not in PP_SCHEDULES:
            raise ConfigError(f"{where}: pp_schedule must be one of {PP_SCHEDULES}")
        if self.tp_impl not in TP_IMPLS:
            raise ConfigError(f"{where}: tp_impl must be one of {TP_IMPLS}")
        checks = [
            (self.hidden % self.heads == 0, "hidden must be a multiple of heads"),
            (self.heads % self.tp == 0, "heads must be a multiple of tp"),
            (self.ffn_size % self.tp == 0, "ffn must be a multiple of tp"),
            (self.layers >= self.pp, "layers must be at least pp (one layer per stage)"),
            (
                self.pp == 1 or self.num_micro_batches >= self.pp,
                "pipeline parallel needs num_micro_batches >= pp",
            ),
            # Pipeline stages are not combined with DDP or TP groups yet: say so up front rather
            # than fail inside a rank.
            (
                self.pp == 1 or (self.dp == 1 and self.tp == 1),
                "pp > 1 with dp or tp > 1 is not supported",
            ),
            (
                self.tp_impl == "megatron" or self.dp == 1,
                "tp_impl dtensor with dp > 1 is not supported",
            ),
        ]
        for ok, problem in checks:
            if not ok:
                raise ConfigError(f"{where}: {problem} ({self.describe()})")
        return self

    def describe(self) -> str:
        return (
            f"layers={self.layers} hidden={self.hidden} ffn={self.ffn_size} heads={self.heads} "
            f"seq={self.seq} micro_batch={self.micro_batch} "
            f"num_micro_batches={self.num_micro_batches} vocab={self.vocab} dp={self.dp} "
            f"pp={self.pp} tp={self.tp} pp_schedule={self.pp_schedule}"
            + (f" tp_impl={self.tp_impl}" if self.tp_impl != "megatron" else "")
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["ffn"] = self.ffn_size
        d["world_size"] = self.world_size
        return d


@dataclass(frozen=True)
class RunControl:
    """How a run is measured.

    `repeat` fresh profiler cycles with one traced step each (docs/groundtruth.md, "Output"); `steps` unprofiled
    steps timed before the profiler starts; `warmup` untimed steps first (allocator, first-call
    costs); `threads` intra-op threads per rank process.
    """

    repeat: int = 3
    steps: int = 5
    warmup: int = 2
    threads: int = 1
    timeout_s: float = 600.0

    def validate(self, where: str = "control") -> RunControl:
        for key in ("repeat", "steps", "threads"):
            if getattr(self, key) < 1:
                raise ConfigError(f"{where}: {key} must be at least 1")
        if self.warmup < 0:
            raise ConfigError(f"{where}: warmup must be >= 0")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Grid:
    control: RunControl = field(default_factory=RunControl)
    runs: tuple[RunConfig, ...] = ()


def _known(cls: type, mapping: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(mapping).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(mapping) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(names)}")
    return dict(mapping)


def make_config(
    base: Mapping[str, Any] | None = None, where: str = "configuration", **kw: Any
) -> RunConfig:
    """A validated `RunConfig` from defaults, then `base`, then keyword overrides."""
    values = _known(RunConfig, dict(base or {}), where)
    values.update(_known(RunConfig, kw, where))
    return RunConfig(**values).validate(where)


def parse_grid(data: Any, where: str = "grid") -> Grid:
    """Build a `Grid` from the parsed YAML of a grid file; `where` names the file in errors."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: a grid file is a mapping with base/runs/grid/control")
    extra = sorted(set(data) - {"control", "base", "runs", "grid"})
    if extra:
        raise ConfigError(f"{where}: unknown top-level key(s) {extra}")
    control = RunControl(**_known(RunControl, data.get("control") or {}, f"{where}: control"))
    control.validate(f"{where}: control")
    base = _known(RunConfig, data.get("base") or {}, f"{where}: base")
    runs: list[RunConfig] = []
    for i, item in enumerate(data.get("runs") or []):
        spot = f"{where}: runs[{i}]"
        item = _known(RunConfig, item or {}, spot)
        name = item.pop("name", None) or _name_of(item)
        runs.append(make_config(base, spot, **item, name=name))
    product = data.get("grid") or {}
    if product:
        product = _known(RunConfig, product, f"{where}: grid")
        keys = list(product)
        for key in keys:
            if not isinstance(product[key], list) or not product[key]:
                raise ConfigError(f"{where}: grid.{key} must be a non-empty list")
        for values in itertools.product(*(product[k] for k in keys)):
            item = dict(zip(keys, values, strict=True))
            runs.append(make_config(base, f"{where}: grid {item}", **item, name=_name_of(item)))
    if not runs:
        runs.append(make_config(base, f"{where}: base", name=base.get("name", "base")))
    names = [r.name for r in runs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"{where}: run names must be unique, repeated: {dupes}")
    return Grid(control=control, runs=tuple(runs))


def _name_of(item: Mapping[str, Any]) -> str:
    return "_".join(f"{k}{v}" for k, v in item.items()) or "base"


def load_grid(path: str | Path) -> Grid:
    """Read and validate a grid YAML file."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read grid file: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return parse_grid(data, str(path))


def default_grid() -> Grid:
    """Tiny configurations covering every parallel mode; a few minutes on two busy cores."""
    return parse_grid(
        {
            "control": {"repeat": 3, "steps": 5, "warmup": 2},
            "base": {"layers": 2, "hidden": 64, "heads": 4, "seq": 32, "micro_batch": 2},
            "runs": [
                {"name": "base"},
                {"name": "dp2", "dp": 2},
                {"name": "pp2_1f1b_mb4", "pp": 2, "num_micro_batches": 4, "pp_schedule": "1f1b"},
                {"name": "pp2_gpipe_mb4", "pp": 2, "num_micro_batches": 4, "pp_schedule": "gpipe"},
                {"name": "tp2", "tp": 2},
            ],
        },
        "default grid",
    )


def host_cores() -> int:
    """The CPU cores this process may run on (its affinity; the machine's count where the OS
    has no affinity call): recorded with every run, as ranks beyond them time-share them."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 0
