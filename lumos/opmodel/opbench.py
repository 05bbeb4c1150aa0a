"""Reading micro-benchmark files in the `../shared/opbench` format.

A folder holds `operator/<GPU>_<operator>_<precision>.csv` (shape columns, then `F_dur(us)` and
`B_dur(us)`, or a single `dur(us)`/`dur`) and `nccl/<GPU>_<collective>_<precision>[_<N>_<G>].csv`
(`shape,nodes,GPUsPerNode,dur(us)`). Files named `<GPU>.csv` are the estimator's summary of its
own regressors' errors (not measurements): `read_reported_errors` reads them.

Rows come out in a canonical form: the shape columns of `features.SHAPE_COLUMNS` (renamed),
`fwd_us`, `bwd_us`, `dur_us`, and the operator, precision and layout from the file name.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lumos.opmodel.features import COLLECTIVES, OPERATORS, SHAPE_COLUMNS, required_columns

__all__ = [
    "DURATION_COLUMNS",
    "OpbenchError",
    "OpbenchFile",
    "find_files",
    "parse_name",
    "read_file",
    "read_reported_errors",
]

# CSV duration header → canonical column
DURATION_COLUMNS: dict[str, str] = {
    "F_dur(us)": "fwd_us",
    "B_dur(us)": "bwd_us",
    "dur(us)": "dur_us",
    "dur": "dur_us",
}
TARGETS: tuple[str, ...] = ("fwd_us", "bwd_us", "dur_us")

_NAME = re.compile(
    r"^(?P<gpu>[^_]+)_(?P<op>.+?)_(?P<prec>fp16|bf16|fp32|fp8|tf32)(?:_(?P<n>\d+)_(?P<g>\d+))?$"
)


class OpbenchError(ValueError):
    """A benchmark file was refused. The message names the file and the problem."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


@dataclass(frozen=True)
class OpbenchFile:
    path: Path
    gpu: str
    operator: str
    precision: str
    layout: str | None  # "N_G" from the file name (collectives), else None
    sha256: str
    rows: pd.DataFrame  # canonical columns; durations NaN where the file leaves them blank


def parse_name(path: Path) -> tuple[str, str, str, str | None]:
    """(gpu, operator, precision, layout) from a file name; OpbenchError when it does not parse."""
    m = _NAME.match(path.stem)
    if not m:
        raise OpbenchError(
            path, "file name is not <GPU>_<operator>_<precision>[_<nodes>_<gpus>].csv"
        )
    op = m["op"]
    if op not in OPERATORS and op not in COLLECTIVES:
        known = ", ".join(sorted(OPERATORS) + sorted(COLLECTIVES))
        raise OpbenchError(path, f"unknown operator {op!r} (known: {known})")
    layout = f"{m['n']}_{m['g']}" if m["n"] else None
    return m["gpu"], op, m["prec"], layout


def is_summary(path: Path) -> bool:
    """The estimator's per-operator error summary (`<GPU>.csv`, a `Best_error%` column)."""
    if "_" in path.stem:
        return False
    with path.open(encoding="utf-8", errors="replace") as fh:
        return "Best_error%" in fh.readline()


def find_files(directory: Path) -> list[Path]:
    """Benchmark CSVs under `directory` (any depth), summaries and hidden files excluded."""
    directory = Path(directory)
    if not directory.is_dir():
        raise OpbenchError(directory, "not a directory")
    out = []
    for p in sorted(directory.rglob("*.csv")):
        if any(part.startswith(".") for part in p.relative_to(directory).parts):
            continue
        if not is_summary(p):
            out.append(p)
    return out


def read_file(
    path: Path, *, require_durations: bool = True, operator: str | None = None
) -> OpbenchFile:
    """Read and validate one benchmark CSV.

    `require_durations=False` accepts blank duration cells (the input of `opmodel predict`).
    `operator` overrides the operator taken from the file name (then the name may be anything).
    """
    path = Path(path)
    if operator is None:
        gpu, op, prec, layout = parse_name(path)
    else:
        if operator not in OPERATORS and operator not in COLLECTIVES:
            raise OpbenchError(path, f"unknown operator {operator!r}")
        m = _NAME.match(path.stem)
        gpu, op, prec = (m["gpu"], operator, m["prec"]) if m else ("", operator, "fp16")
        layout = f"{m['n']}_{m['g']}" if m and m["n"] else None
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OpbenchError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise OpbenchError(path, f"not a readable CSV: {exc}") from exc
    raw.columns = [c.strip() for c in raw.columns]

    unknown = [c for c in raw.columns if c not in SHAPE_COLUMNS and c not in DURATION_COLUMNS]
    if unknown:
        raise OpbenchError(path, f"unknown column(s) {unknown}")
    renamed = {c: SHAPE_COLUMNS.get(c, DURATION_COLUMNS.get(c)) for c in raw.columns}
    targets = [renamed[c] for c in raw.columns if c in DURATION_COLUMNS]
    if not targets and require_durations:
        raise OpbenchError(path, "no duration column (F_dur(us)/B_dur(us) or dur(us))")
    missing = [c for c in required_columns(op) if c not in renamed.values()]
    if missing:
        inverse = {v: k for k, v in SHAPE_COLUMNS.items()}
        raise OpbenchError(
            path, f"missing column(s) {[inverse.get(c, c) for c in missing]} for operator {op}"
        )

    rows = pd.DataFrame(index=raw.index)
    for col, canon in renamed.items():
        text = raw[col].str.strip()
        values = pd.to_numeric(text.where(text != ""), errors="coerce")
        bad = values.isna() & (text != "")
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise OpbenchError(
                path, f"line {i + 2}: column {col!r} is not a number: {raw[col].iloc[i]!r}"
            )
        blank = values.isna()
        is_target = canon in TARGETS
        if blank.any() and (not is_target or require_durations):
            i = int(np.flatnonzero(blank.to_numpy())[0])
            raise OpbenchError(path, f"line {i + 2}: column {col!r} is empty")
        nonpos = values <= 0
        if nonpos.any():
            i = int(np.flatnonzero(nonpos.to_numpy())[0])
            raise OpbenchError(
                path, f"line {i + 2}: column {col!r} must be positive, got {raw[col].iloc[i]!r}"
            )
        rows[canon] = values.astype(np.float64)
    if len(rows) == 0:
        raise OpbenchError(path, "no data rows")
    if layout is not None and {"nodes", "gpus_per_node"} <= set(rows.columns):
        n, g = (int(x) for x in layout.split("_"))
        if not ((rows["nodes"] == n) & (rows["gpus_per_node"] == g)).all():
            raise OpbenchError(path, f"rows disagree with the layout {layout} in the file name")
    return OpbenchFile(path, gpu, op, prec, layout, hashlib.sha256(data).hexdigest(), rows)


def read_reported_errors(path: Path) -> pd.DataFrame:
    """The estimator's own per-operator error summary: operator, target, layout, error (fraction)."""
    df = pd.read_csv(path)
    need = {"Function", "Best_error%"}
    if not need <= set(df.columns):
        raise OpbenchError(path, f"not an error summary (needs columns {sorted(need)})")
    target = df.get("Propagation", pd.Series(["dur"] * len(df)))
    layout = None
    if {"Nodes", "GPUsPerNode"} <= set(df.columns):
        layout = (
            df["Nodes"].astype(int).astype(str) + "_" + df["GPUsPerNode"].astype(int).astype(str)
        )
    return pd.DataFrame(
        {
            "operator": df["Function"],
            "target": target.map({"fwd": "fwd_us", "bwd": "bwd_us", "dur": "dur_us"}),
            "layout": layout if layout is not None else None,
            "error": df["Best_error%"].astype(float),
        }
    )
