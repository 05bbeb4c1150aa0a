"""Ingestion benchmark: lumos against HolisticTraceAnalysis's loader and plain orjson.loads.

    .venv/bin/python bench/ingest.py [--runs 3] [--target-gb 1.0] [--no-hta-large]
                                     [--mid-gb 0.25] [--markdown FILE] [--no-corpus]
                                     [--cold-cache]

Inputs: the largest shared trace (hta/df_index_resolver, 54 MB of JSON): as shipped (gzip'd,
"54MB.gz") and written out plain ("54MB"), a ~1 GB trace made
by repeating its events (written, uncompressed, to a temp dir, never into the repo), and the
many-small-files case: the gzip'd traces of tests/data/corpus in one call. Each contender runs
in its own subprocess; its wall time, CPU time and peak RSS (ru_maxrss of that process) are
taken, the runs interleaved (round k runs every contender once, the order rotated each round),
and the medians over --runs are printed with the ratios ours / HTA and ours / orjson.
With --no-hta-large (HTA needs many GB and minutes on 1 GB), HTA is measured on a --mid-gb trace
built the same way, alongside lumos, so a ratio is still printed. --markdown writes the table.
Contenders: `lumos ingest` end to end (Parquet written, into an existing empty warehouse, as a
nightly ingest finds it), the lumos reader alone (Arrow batches),
HTA 0.5.0 `parse_trace_dataframe` (the `bench` extra), `orjson.loads` of the file's bytes.
On inputs up to --warm-max-gb (the 54 MB trace, the corpus), `lumos ingest` and HTA are also timed
warm: --warm-passes passes inside one process after its imports and a first pass, each lumos pass
into a fresh warehouse; the ratio of those is the two loaders' own rates, without the fixed
start-up a one-file process pays (lumos ~0.45 s of CPU, about 60 % of its 54 MB run).
Not a test; not run in CI.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from isal import igzip

from warehouse.catalog import build_catalog

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LUMOS_SHARED", ROOT.parent / "shared")) / "traces"
SOURCE = SHARED / "hta/df_index_resolver/df_index_resolver.json.gz"
CORPUS = ROOT / "tests/data/corpus"

# Each runner prints one JSON line {"events": n}; the harness measures time and RSS around it.
# set up as the `lumos ingest` process is (no pandas, one allocator) and ended as it is (no teardown)
_READER = """
import os, sys
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as lumos.cli.main, before numpy's import
from warehouse.ingest_process import prepare_ingest_process
prepare_ingest_process()
from lumos.process_exit import exit_now
from warehouse.readers import open_trace
n = sum(b.num_rows for p in sys.argv[1:] for b in open_trace(p).batches())
print(n)
exit_now(0)
"""
# The CPU time of the child (user + sys) is reported too: the machine is shared, and the targets
# are per core, so MB per CPU-second is the figure that does not depend on other people's load.
_HTA = """
import sys, logging
logging.disable(logging.WARNING)
from hta.common.trace_parser import parse_trace_dataframe
from hta.configs.parser_config import ParserConfig
n = 0
for p in sys.argv[1:]:
    meta, df, symbols = parse_trace_dataframe(p, ParserConfig.get_default_cfg())
    n += len(df)
print(n)
"""
_ORJSON = """
import sys, orjson
from isal import igzip
n = 0
for p in sys.argv[1:]:
    with (igzip.open if p.endswith(".gz") else open)(p, "rb") as f:
        n += len(orjson.loads(f.read())["traceEvents"])
print(n)
"""
# Warm runners: imports done and one pass made before timing, then --passes passes timed inside
# the process (CPU time of all its threads). They measure the loader's own rate without the
# interpreter's start-up and imports (lumos: ~0.45 s of CPU, HTA: its pandas stack), the fixed
# cost a fleet ingest pays once per process. Each lumos pass ingests into a fresh warehouse whose
# (empty) catalog exists already, as a nightly ingest finds it; each prints WARM {"cpu": [...], "wall": [...]}.
_LUMOS_WARM = """
import json, os, shutil, sys, tempfile, time
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as lumos.cli.main, before numpy's import
from warehouse.ingest_process import prepare_ingest_process
prepare_ingest_process()  # as the `lumos ingest` process does
from warehouse.catalog import build_catalog
from warehouse.ingest import ingest
passes, one_job, paths = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3:]
tmp = tempfile.mkdtemp(prefix="lumos-warm-")
cpu, wall = [], []
# Existing warehouses, as a nightly ingest finds them, all made before the timed passes: DuckDB
# hands the malloc heap back to the OS when a catalog is built (malloc_trim), and an ingest
# process runs no DuckDB between its files.
for k in range(passes + 1):
    build_catalog(f"{tmp}/wh{k}")
for k in range(passes + 1):
    wh = f"{tmp}/wh{k}"
    t, c = time.perf_counter(), time.process_time()
    ingest(paths, warehouse=wh, job="bench" if one_job else None)
    if k:  # pass 0 is the warm-up
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
    shutil.rmtree(wh)
print("WARM", json.dumps({"cpu": cpu, "wall": wall}))
"""
_HTA_WARM = """
import json, logging, sys, time
logging.disable(logging.WARNING)
from hta.common.trace_parser import parse_trace_dataframe
from hta.configs.parser_config import ParserConfig
passes, paths = int(sys.argv[1]), sys.argv[3:]
cpu, wall = [], []
for k in range(passes + 1):
    t, c = time.perf_counter(), time.process_time()
    for p in paths:
        parse_trace_dataframe(p, ParserConfig.get_default_cfg())
    if k:
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
print("WARM", json.dumps({"cpu": cpu, "wall": wall}))
"""
# Runs a command and reports its wall time and its peak RSS (the only child: RUSAGE_CHILDREN).
_HARNESS = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
out = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
rss = ru.ru_maxrss * 1024
print(json.dumps({"rc": out.returncode, "wall": wall, "rss": rss, "cpu": ru.ru_utime + ru.ru_stime,
                  "stdout": out.stdout[-2000:], "stderr": out.stderr[-2000:]}))
"""


# An input: the files (or directories, for `lumos ingest`), their uncompressed bytes, their events,
# and whether `lumos ingest` gets `--job bench` (one file) or derives a job per directory.
Input = tuple[list[Path], int, int, bool]


def make_inputs(tmp: Path, target_gb: float, mid_gb: float | None = None) -> dict[str, Input]:
    """{label: input} for the source trace and its repetitions."""
    text = igzip.open(SOURCE).read()
    small = tmp / "df_index_resolver.json"
    small.write_bytes(text)
    key = text.index(b'"traceEvents"')
    start = text.index(b"{", text.index(b"[", key))
    end = text.rindex(b"]")
    end = text.rindex(b"}", 0, end) + 1
    region = text[start:end]
    n_events = len(json.loads(text)["traceEvents"])
    # the shared file as it is shipped (gzip'd), and its JSON written out plain: HTA reads both
    out: dict[str, Input] = {
        "54MB": ([small], len(text), n_events, True),
        "54MB.gz": ([SOURCE], len(text), n_events, True),
    }
    for gb in [mid_gb, target_gb] if mid_gb else [target_gb]:
        copies = max(1, round(gb * 1e9 / len(region)))
        big = tmp / f"df_index_resolver_x{copies}.json"
        with open(big, "wb") as f:
            f.write(text[:start])
            for k in range(copies):
                if k:
                    f.write(b",\n")
                f.write(region)
            f.write(text[end:])
        size = big.stat().st_size
        out[f"{size / 1e9:.2f}GB"] = ([big], size, n_events * copies, True)
    return out


def corpus_input() -> Input:
    """The checked-in ground-truth corpus: 18 small gzip'd traces in 13 job directories, the
    nightly many-small-files case (per-file and per-process overheads show here)."""
    files = sorted(CORPUS.glob("*/*.json.gz"))
    size = events = 0
    for f in files:
        text = igzip.open(f).read()
        size += len(text)
        events += len(json.loads(text)["traceEvents"])
    return files, size, events, False


def run(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _HARNESS, *cmd], capture_output=True, text=True, check=True, env=env
    )
    return json.loads(out.stdout)


def lumos_cmd(paths: list[Path], wh: Path, one_job: bool) -> list[str]:
    exe = Path(sys.executable).parent / "lumos"
    job = ["--job", "bench"] if one_job else []
    return [str(exe), "ingest", *map(str, paths), *job, "--warehouse", str(wh), "-q"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--target-gb", type=float, default=1.0)
    ap.add_argument("--no-hta-large", action="store_true", help="skip HTA on the large trace")
    ap.add_argument(
        "--mid-gb",
        type=float,
        default=0.25,
        help="with --no-hta-large: also measure every contender on a trace of this size",
    )
    ap.add_argument("--markdown", type=Path, help="write the results table (Markdown) here")
    ap.add_argument(
        "--only",
        action="append",
        help="measure only these contenders (repeatable), e.g. --only 'lumos reader'",
    )
    ap.add_argument(
        "--no-corpus",
        action="store_true",
        help="skip the many-small-files case (tests/data/corpus)",
    )
    ap.add_argument(
        "--cold-cache",
        action="store_true",
        help="also time `lumos ingest` of the corpus with an empty numba cache (first run after an "
        "install or a change of the reader's kernels: they are compiled, ~12 s of CPU)",
    )
    ap.add_argument(
        "--warm-passes",
        type=int,
        default=3,
        help="on inputs up to --warm-max-gb, also time lumos ingest and HTA warm: this many passes "
        "inside one process after its imports and a first pass (0: none)",
    )
    ap.add_argument("--warm-max-gb", type=float, default=0.1)
    args = ap.parse_args()
    py = sys.executable
    # The repo's modules byte-compiled first, as `pip install` does for an installed package
    # (HTA's are): an editable install under PYTHONDONTWRITEBYTECODE would otherwise compile
    # them from source in every lumos process (~0.04 s of CPU).
    for pkg in ("lumos", "warehouse", "kernels", "pipelines", "lumos_sql"):
        compileall.compile_dir(ROOT / pkg, quiet=1)
    tmp = Path(tempfile.mkdtemp(prefix="lumos-bench-"))
    try:
        inputs = make_inputs(tmp, args.target_gb, args.mid_gb if args.no_hta_large else None)
        largest = max(inputs, key=lambda k: inputs[k][1])
        if not args.no_corpus:
            inputs["corpus"] = corpus_input()
        results: dict[tuple[str, str], dict] = {}
        for label, (paths, size, n_events, one_job) in inputs.items():
            files = [str(p) for p in paths]
            contenders: dict[str, list[str] | None] = {
                "lumos ingest": None,
                "lumos reader": [py, "-c", _READER, *files],
                "HTA 0.5.0": [py, "-c", _HTA, *files],
                "orjson.loads": [py, "-c", _ORJSON, *files],
            }
            if label == "corpus" and args.cold_cache:
                contenders["lumos ingest, cold cache"] = None
            if args.warm_passes > 0 and size <= args.warm_max_gb * 1e9:
                flag = [str(args.warm_passes), "1" if one_job else "0", *files]
                contenders["lumos ingest, warm"] = [py, "-c", _LUMOS_WARM, *flag]
                contenders["HTA 0.5.0, warm"] = [py, "-c", _HTA_WARM, *flag]
            if args.no_hta_large and label == largest:
                contenders.pop("HTA 0.5.0")
                contenders.pop("HTA 0.5.0, warm", None)
            if args.only:
                contenders = {k: v for k, v in contenders.items() if k in args.only}
            # Runs are interleaved (each round runs every contender once), so a machine that
            # slows down or speeds up during the bench moves every contender alike and the
            # ratios stay fair; HTA's own time moved 9 % between two whole runs of the bench.
            measured: dict[str, tuple[list[float], list[float], list[int]]] = {
                name: ([], [], []) for name in contenders
            }
            failed: set[str] = set()
            names = list(contenders)
            for r in range(args.runs):
                # the order rotates each round: no contender always runs after the same one
                # (lumos's 1 GB ingest took 4.8 s of CPU right after HTA and orjson, 4.1 s alone)
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    cmd = contenders[name]
                    if name in failed:
                        continue
                    env = None
                    cli = cmd is None  # `lumos ingest` itself, into a fresh warehouse
                    if cli:
                        # into a warehouse that exists (empty), as the nightly ingest finds it:
                        # a new warehouse's first ingest also creates its catalog, once (~0.1 s)
                        wh = tmp / f"wh-{label}-{r}"
                        build_catalog(wh)
                        cmd = lumos_cmd(paths, wh, one_job)
                    if name.endswith("cold cache"):
                        env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp / f"numba-{r}")}
                    res = run(cmd, env)
                    if cli:
                        shutil.rmtree(tmp / f"wh-{label}-{r}", ignore_errors=True)
                    if res["rc"] != 0:
                        print(f"{name} on {label} failed: {res['stderr'][-500:]}", file=sys.stderr)
                        failed.add(name)
                        continue
                    walls, cpus, rsss = measured[name]
                    if name.endswith(", warm"):  # the passes timed inside the process
                        line = [x for x in res["stdout"].splitlines() if x.startswith("WARM ")][-1]
                        inner = json.loads(line[5:])
                        res["wall"] = statistics.median(inner["wall"])
                        res["cpu"] = statistics.median(inner["cpu"])
                    walls.append(res["wall"])
                    cpus.append(res["cpu"])
                    rsss.append(res["rss"])
            for name, (walls, cpus, rsss) in measured.items():
                if not walls:
                    continue
                wall = statistics.median(walls)
                cpu = statistics.median(cpus)
                results[(label, name)] = {
                    "wall_s": wall,
                    "cpu_s": cpu,
                    "events_per_s": n_events / cpu,  # per CPU-second, i.e. per core
                    "mb_per_s": size / cpu / 1e6,
                    "wall_mb_per_s": size / wall / 1e6,
                    "peak_rss_mb": max(rsss) / 1e6,
                    "runs": len(walls),
                }
                r = results[(label, name)]
                print(
                    f"{label:>7} {name:<13} cpu {cpu:7.2f} s wall {wall:7.2f} s "
                    f"{r['events_per_s'] / 1e3:7.0f} kev/s/core {r['mb_per_s']:6.1f} MB/s/core "
                    f"(wall {r['wall_mb_per_s']:6.1f} MB/s)  peak RSS {r['peak_rss_mb']:6.0f} MB  "
                    f"(median of {len(walls)}: CPU {', '.join(f'{c:.2f}' for c in cpus)} s)",
                    flush=True,
                )
        print()
        for label in inputs:
            for ours in ("lumos ingest", "lumos ingest, cold cache", "lumos reader"):
                o = results.get((label, ours))
                if o is None:
                    continue
                for peer in ("HTA 0.5.0", "orjson.loads"):
                    p = results.get((label, peer))
                    if p:
                        ratio = o["events_per_s"] / p["events_per_s"]
                        print(f"{label:>7} {ours} / {peer}: {ratio:5.2f}x events per CPU-second")
            o, p = (
                results.get((label, "lumos ingest, warm")),
                results.get((label, "HTA 0.5.0, warm")),
            )
            if o and p:
                ratio = o["events_per_s"] / p["events_per_s"]
                print(
                    f"{label:>7} warm: lumos ingest / HTA 0.5.0: {ratio:5.2f}x events per CPU-second"
                )
        if args.markdown:
            args.markdown.write_text(markdown(inputs, results))
            print(f"table written to {args.markdown}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def markdown(inputs: dict[str, Input], results: dict[tuple[str, str], dict]) -> str:
    """The results as a Markdown table, with each row's ratio to HTA and to orjson on the same
    input (events per CPU-second, both measured in this run)."""
    lines = [
        "| input | contender | CPU s | wall s | events/s per core | MB/s per core | "
        "peak RSS MB | x HTA | x orjson |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = (
        "lumos ingest",
        "lumos ingest, cold cache",
        "lumos reader",
        "HTA 0.5.0",
        "orjson.loads",
        "lumos ingest, warm",
        "HTA 0.5.0, warm",
    )
    for label, (_, _size, n_events, _) in inputs.items():
        orj = results.get((label, "orjson.loads"))
        for name in names:
            r = results.get((label, name))
            if r is None:
                continue
            # a warm row is compared with HTA warm: neither pays its process's start-up
            hta = results.get((label, "HTA 0.5.0, warm" if name.endswith("warm") else "HTA 0.5.0"))
            x_hta = f"{r['events_per_s'] / hta['events_per_s']:.1f}" if hta else "n/a"
            x_orj = (
                f"{r['events_per_s'] / orj['events_per_s']:.1f}"
                if orj and not name.endswith("warm")
                else "n/a"
            )
            lines.append(
                f"| {label} ({n_events:,} events) | {name} | {r['cpu_s']:.2f} | {r['wall_s']:.2f} | "
                f"{r['events_per_s'] / 1e3:,.0f}k | {r['mb_per_s']:.1f} | "
                f"{r['peak_rss_mb']:,.0f} | {x_hta} | {x_orj} |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
