"""Collective times from the A100 NCCL micro-benchmarks vs the datasheet link, on held-out sizes.

    .venv/bin/python bench/collectives_opbench.py [--shared ../shared]

Imports ../shared/opbench/perlmutter_a100/nccl into a temporary warehouse, fits the GPU
estimate's micro-benchmark tier (`lumos.estimate.comm_bench`) on every other message size of each
file and layout, and prints, per file and layout, the relative error on the sizes between
(median / p90) and the datasheet model's (`CommModel.for_device`, signed median).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

A100 = "NVIDIA A100-SXM4-80GB"
CASES = [
    ("allreduce", "1_2", 2),
    ("allreduce", "1_4", 4),
    ("allreduce_large", "1_2", 2),
    ("allreduce_large", "1_4", 4),
    ("allreduce_large", "2_4", 8),
    ("p2p", "1_2", 0),
]


def main() -> None:
    from lumos.estimate.comm import CommModel
    from lumos.estimate.comm_bench import ALLREDUCE_FILES, P2P_FILES, from_rows
    from lumos.opmodel.store import import_dir, load_rows

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=Path(__file__).parents[1].parent / "shared")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        import_dir(args.shared / "opbench" / "perlmutter_a100" / "nccl", "a100", Path(tmp))
        ops = (*ALLREDUCE_FILES, *P2P_FILES)
        rows = pd.concat([load_rows(Path(tmp), "a100", op) for op in ops])
    rows = rows.sort_values(["operator", "layout", "shape"]).reset_index(drop=True)
    rank = rows.groupby(["operator", "layout"]).cumcount()
    train, test = rows[rank % 2 == 0], rows[rank % 2 == 1]
    model = from_rows(train, "a100")
    sheet = CommModel.for_device(A100)
    print(f"{'file layout':24s} {'rows':>5s} {'median%':>8s} {'p90%':>6s} {'sheet%':>7s}")
    for op, lay, n in CASES:
        part = test[(test["operator"] == op) & (test["layout"] == lay)]
        y = part["dur_us"].to_numpy() * 1e3
        nbytes = part["shape"].to_numpy() * 2
        if n:
            pred = np.array([model.allreduce_ns(b, n) for b in nbytes])
            ref = np.array([sheet.allreduce_ns(b, n) for b in nbytes])
        else:
            pred = np.array([model.p2p_ns(b) for b in nbytes])
            ref = np.array([sheet.p2p_ns(b) for b in nbytes])
        err = np.abs(pred / y - 1)
        print(
            f"{op + ' ' + lay:24s} {len(y):5d} {100 * np.median(err):8.2f} "
            f"{100 * np.quantile(err, 0.9):6.1f} {100 * np.median(ref / y - 1):+7.1f}"
        )


if __name__ == "__main__":
    main()
