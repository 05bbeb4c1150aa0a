"""Issue 34's torture bench: every way the issue broke the warehouse, tried again.

    PYTHONPATH=. .venv/bin/python bench/torture.py [--quick] [--keep]

Drives temporary warehouses through real `lumos` processes (and the real Dagster definitions
for the inbox): hostile job names, `lumos sql` statements that write or read outside the
warehouse, bad inbox entries, killed ingests with worker pools, queries racing commits and
compactions, inputs of unbounded size, files that used to be skipped without a word, the
fsync order, concurrent and killed ingests. Prints, per area, the cases tried and handled, and
one line per case not handled. Handled: a clear message (no traceback) naming the problem, the
warehouse unchanged (its files and manifest rows) and a later ingest still working. The base
input is one rank of ../shared/traces/param/dlrm_8rank (3,290 events). The cases are in
torture_hostile.py, torture_processes.py and torture_limits.py; their checks in torture_checks.py.
`--quick` runs 17 of them (~30 s of CPU); the default all 55 (~100 s of CPU, ~4 minutes on two
busy cores). Not a test; not run in CI.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

# the cases share the tests' warehouse checks (`tests.warehouse_checks`): the repository's root
# on the path, as `python bench/torture.py` from anywhere needs
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from torture_bench import AREAS, BASE, Bench, Case
from torture_hostile import inbox, names, skips, sql
from torture_limits import unbounded
from torture_processes import concurrency, durability, readers, workers

# ------------------------------------------------------------------------------------- report


def report(b: Bench) -> int:
    print(f"\n{'area':<32} {'tried':>5} {'handled':>7}")
    for key, title in AREAS.items():
        mine = [c for c in b.cases if c.area == key]
        if mine:
            print(f"{title:<32} {len(mine):>5} {sum(c.handled for c in mine):>7}")
    total = sum(c.handled for c in b.cases)
    print(f"{'all':<32} {len(b.cases):>5} {total:>7}")
    missed = [c for c in b.cases if not c.handled]
    if missed:
        print("\nnot handled:")
        for c in missed:
            print(f"  [{c.area}] {c.name}: {c.what}")
    notes = [c for c in b.cases if c.handled and c.what]
    if notes:
        print("\nfigures:")
        for c in notes:
            print(f"  [{c.area}] {c.name}: {c.what}")
    if b.scaled:
        print("\nscaled down (the size is not what the case tests) or not tried:")
        for line in b.scaled:
            print(f"  {line}")
    return 0 if not missed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a subset, in under a minute")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--only", nargs="*", choices=list(AREAS), help="run only these areas")
    args = parser.parse_args(argv)
    if not BASE.exists():
        print(f"torture: {BASE} is missing (../shared/traces; set LUMOS_SHARED)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("torture: not root: the cases run as user nobody are not tried", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="lumos-torture-"))
    tmp.chmod(0o755)  # the permission cases run as nobody
    b = Bench(tmp, args.quick)
    areas = {
        "names": names, "sql": sql, "inbox": inbox, "workers": workers, "readers": readers,
        "unbounded": unbounded, "skips": skips, "durability": durability, "concurrency": concurrency,
    }  # fmt: skip
    if args.quick:
        areas = {k: f for k, f in areas.items() if k not in ("inbox", "workers")}
    t0 = time.monotonic()
    try:
        for key, run in areas.items():
            if args.only and key not in args.only:
                continue
            print(f"{AREAS[key]}", file=sys.stderr)
            try:
                run(b)
            except Exception as exc:  # an area that could not be set up: one case, not handled
                b.cases.append(
                    Case(key, "setting up the area", False, f"{type(exc).__name__}: {exc}")
                )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    code = report(b)
    print(
        f"\n{len(b.cases)} cases in {time.monotonic() - t0:.0f} s{' (--quick)' if args.quick else ''}"
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
