"""Issue 34's torture bench: every way the issue broke the warehouse, tried again.

    PYTHONPATH=. .venv/bin/python bench/torture.py [--quick] [--keep]

Drives temporary warehouses through real `lumos` processes (and the real Dagster definitions
for the inbox): hostile job names, `lumos sql` statements that write or read outside the
warehouse, bad inbox entries, killed ingests with worker pools, queries racing commits and
compactions, inputs of unbounded size, files that used to be skipped without a word, the
fsync order, concurrent and killed ingests. Prints, per area, the cases tried and handled, and
one line per case not handled. Handled: a clear message (no traceback) naming the problem, the
warehouse unchanged (its files and manifest rows) and a later ingest still working. The base
input is one rank of ../shared/traces/param/dlrm_8rank (3,290 events). `--quick` runs a subset
(under a minute on 2 cores); the default runs all (~4 minutes). Not a test; not run in CI.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torture_checks import (
    ROOT,
    Verdict,
    alive,
    descendants,
    finish,
    lumos,
    lumos_env,
    running,
    start,
    state,
)
from torture_inputs import blanks_between_events, giant_string, load, padded, write_gz

SHARED = Path(os.environ.get("LUMOS_SHARED", ROOT.parent / "shared")).resolve() / "traces"
DLRM = SHARED / "param/dlrm_8rank/kineto"
BASE = DLRM / "worker0_step_12.1694128201545.pt.trace.json.gz"
NCCL = SHARED / "hta/nccl_parser_config/nccl_data.json.gz"
BIG = SHARED / "hta/df_index_resolver/df_index_resolver.json.gz"
GPT_CPU = ROOT / "examples/traces/gpt_cpu"
NOBODY = 65534
AREAS = {
    "names": "1. names",
    "sql": "2. lumos sql",
    "inbox": "3. inbox",
    "workers": "4. workers / kill",
    "readers": "5. readers during compaction",
    "unbounded": "6. unbounded input",
    "skips": "7. silent skips",
    "durability": "8. durability",
    "concurrency": "concurrency + kill -9",
}


@dataclass
class Case:
    area: str
    name: str
    handled: bool
    what: str


class Bench:
    """The cases run so far, the scratch folder and what every case shares."""

    def __init__(self, tmp: Path, quick: bool) -> None:
        self.tmp, self.quick = tmp, quick
        self.cases: list[Case] = []
        self.scaled: list[str] = []
        self.doc = load(BASE)

    def case(self, area: str, name: str, run: Callable[[], Verdict], quick: bool = False) -> None:
        """Run one case (in --quick, only those marked quick) and keep its verdict."""
        if self.quick and not quick:
            return
        t0 = time.monotonic()
        try:
            v = run()
        except Exception as exc:  # the bench's own failure is a case not handled, said
            v = Verdict([f"bench error: {type(exc).__name__}: {str(exc)[:300]}"])
        self.cases.append(Case(area, name, v.handled, v.summary()))
        mark = "ok  " if v.handled else "FAIL"
        print(f"  {mark} [{area}] {name} ({time.monotonic() - t0:.1f} s)", file=sys.stderr)

    def warehouse(self, name: str) -> Path:
        """A fresh warehouse holding the base trace as job `base`."""
        wh = self.tmp / name
        ran = lumos("ingest", str(BASE), "--job", "base", "-q", "--warehouse", str(wh))
        if ran.rc != 0:
            raise RuntimeError(f"setting up {wh}: {ran.brief()}")
        return wh

    def file(self, rel: str, doc: dict) -> Path:
        return write_gz(self.tmp / "inputs" / rel, doc)


def sql_rows(wh: Path, query: str) -> list[dict]:
    ran = lumos("sql", query, "--format", "json", "--warehouse", str(wh))
    if ran.rc != 0:
        raise RuntimeError(f"{query!r}: {ran.brief()}")
    return json.loads(ran.out)


def jobs(wh: Path) -> dict[str, int]:
    """Each job of the warehouse with its ok files."""
    rows = sql_rows(wh, "select job, count(*) as n from traces where status = 'ok' group by job")
    return {r["job"]: r["n"] for r in rows}


# ------------------------------------------------------------------------------------- 1. names


def names(b: Bench) -> None:
    wh = b.warehouse("names")

    def ingest_as(name: str, *paths: Path, tag: str, job: bool = True) -> Verdict:
        v = Verdict()
        args = ["--job", name] if job else []
        ran = lumos("ingest", *map(str, paths), *args, "-q", "--warehouse", str(wh))
        v.succeeded(ran, "ingested")
        v.need(not (wh / ".commit.journal").exists(), "left .commit.journal")
        v.need(name in jobs(wh), "the job's full name is not in `traces`")
        long = [p.name for p in wh.rglob("*") if len(p.name.encode()) > 255]
        v.need(not long, f"a path component over 255 bytes: {long[:1]}")
        v.later_ingest_works(wh, BASE, tag)
        return v

    b.case("names", "--job of 300 characters", lambda: ingest_as("j" * 300, BASE, tag="n1"), True)
    cjk = "数据" * 14
    folder = b.tmp / "inputs" / "cjk" / cjk
    folder.mkdir(parents=True)
    shutil.copy(BASE, folder / "rank0.json.gz")
    b.case(
        "names",
        "a folder of 28 CJK characters",
        lambda: ingest_as(cjk, folder, tag="n2", job=False),
    )
    named = b.file(
        "named.json.gz",
        {**b.doc, "distributedInfo": {**b.doc["distributedInfo"], "job_name": "n" * 300}},
    )
    b.case(
        "names", "distributedInfo.job_name of 300 characters",
        lambda: ingest_as("n" * 300, named, tag="n3", job=False),
    )  # fmt: skip

    def twins() -> Verdict:
        v = ingest_as("k" * 299 + "a", BASE, tag="n4a")
        w = ingest_as("k" * 299 + "b", BASE, tag="n4b")
        v.failed += w.failed
        dirs = [p for p in (wh / "events").iterdir() if p.name.startswith("job=kkkk")]
        v.need(len(dirs) == 2, f"{len(dirs)} directories for two names")
        return v

    b.case("names", "two long names differing in their last character", twins)

    def stale_journal(content: str, tag: str) -> Callable[[], Verdict]:
        def run() -> Verdict:
            v = Verdict()
            (wh / ".commit.journal").write_text(content)
            before = state(wh)
            ran = lumos("ingest", str(BASE), "--job", f"after-{tag}", "-q", "--warehouse", str(wh))
            v.succeeded(ran, "1 ingested")
            v.need(not (wh / ".commit.journal").exists(), "the journal is still there")
            v.need(len(state(wh).rows) == len(before.rows) + 1, "not one new manifest row")
            v.later_ingest_works(wh, BASE, tag)
            (wh / ".commit.journal").unlink(missing_ok=True)  # the next case starts clean
            return v

        return run

    b.case(
        "names", "a dead commit's journal naming a 300-character job",
        stale_journal(json.dumps([["j" * 300, 0, "0" * 64], ["数据" * 40, 1, "1" * 64]]), "n5"),
    )  # fmt: skip
    b.case(
        "names", "a journal that is not a list of (job, rank, sha256)",
        stale_journal(json.dumps({"job": 1}), "n6"),
    )  # fmt: skip
    b.case(
        "names", "a long CJK partition, then another, through Dagster", lambda: _dagster_names(b)
    )


def _dagster_names(b: Bench) -> Verdict:

    v = Verdict()
    inbox = b.tmp / "inputs" / "inbox-names"
    for job in ("数据" * 14, "other"):
        (inbox / job).mkdir(parents=True)
        shutil.copy(BASE, inbox / job / "rank0.json.gz")
    wh = b.tmp / "wh-dagster-names"
    for job in ("数据" * 14, "other"):
        result = _materialize(job, inbox, wh)
        v.need(result.success, f"partition {job[:12]}…'s run failed: {_failure(result)[:200]}")
    v.need(set(jobs(wh)) == {"数据" * 14, "other"}, f"jobs {sorted(jobs(wh))}")
    return v


def _materialize(job: str, inbox: Path, wh: Path):  # noqa: ANN202
    """One partition's ingest run on a fresh Dagster instance; its console log (a failing
    run's traceback among it) kept out of the bench's output."""
    from pipelines.assets.ingest import trace_events
    from tests.dagster_run import materialize_job

    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return materialize_job([trace_events], job, inbox, wh, raise_on_error=False)


def _failure(result) -> str:  # noqa: ANN001
    return " ".join(
        str(e.event_specific_data.error.message)
        for e in result.all_events
        if e.is_step_failure and e.event_specific_data.error
    )


# --------------------------------------------------------------------------------- 2. lumos sql


def sql(b: Bench) -> None:
    wh = b.warehouse("sql")
    [events_file] = [p for p in (wh / "events").rglob("*.parquet") if p.name != "_schema.parquet"]
    outside = b.tmp / "outside"
    outside.mkdir()
    cases = [
        ("COPY into manifest/", f"copy (select * from traces) to '{wh}/manifest/part-x.parquet' (format parquet)", "COPY"),
        ("COPY over an events file", f"copy (select * from events limit 5) to '{events_file}' (format parquet)", "COPY"),
        ("COPY outside the warehouse", f"copy (select 1 as a) to '{outside}/out.csv'", "COPY"),
        ("read_csv('/etc/passwd')", "select * from read_csv('/etc/passwd')", "/etc/passwd"),
        ("read_text('/etc/passwd')", "select * from read_text('/etc/passwd')", "/etc/passwd"),
        ("glob('/etc/*')", "select * from glob('/etc/*')", "/etc"),
        ("INSTALL httpfs", "install httpfs", "not run"),
        ("two statements", f"select 1; copy (select 1 as a) to '{outside}/two.csv'", "one statement"),
        ("SET enable_external_access", "set enable_external_access = false", "SET"),
    ]  # fmt: skip

    def run(query: str, says: str, tag: str) -> Verdict:
        v = Verdict()
        before = state(wh)
        ran = lumos("sql", query, "--warehouse", str(wh))
        v.refused(ran, says)
        v.need("root:" not in ran.out, "printed /etc/passwd")
        v.unchanged(before, state(wh))
        v.need(not list(outside.iterdir()), f"wrote {[p.name for p in outside.iterdir()]}")
        n = sql_rows(wh, "select count(*) as n from events where job = 'base'")[0]["n"]
        v.need(n == len(b.doc["traceEvents"]), f"job base shows {n} events")
        v.later_ingest_works(wh, BASE, tag)
        return v

    for k, (name, query, says) in enumerate(cases):
        quick = k in (0, 3)  # COPY into manifest/, read_csv
        b.case("sql", name, lambda q=query, s=says, k=k: run(q, s, f"s{k}"), quick)


# ------------------------------------------------------------------------------------- 3. inbox


def inbox(b: Bench) -> None:
    import dagster as dg

    from pipelines.resources import WarehouseResource
    from pipelines.sensors import inbox_sensor

    box = b.tmp / "inputs" / "inbox"
    for job in ("alpha", "beta"):
        (box / job).mkdir(parents=True)
        shutil.copy(BASE, box / job / "rank0.json.gz")
    wh = b.tmp / "wh-inbox"
    resources = {"lumos": WarehouseResource(warehouse=str(wh), inbox=str(box))}

    def tick() -> list[str]:
        quiet = contextlib.redirect_stderr(io.StringIO())  # its warnings: checked in the runs
        with quiet, dg.instance_for_test() as instance:
            context = dg.build_sensor_context(instance=instance, cursor=None, resources=resources)
            return sorted(r.partition_key for r in inbox_sensor(context).run_requests)

    def bad_entry(make: Callable[[], None], job: str, says: str, other: str) -> Verdict:
        v = Verdict()
        make()
        try:
            requested = tick()
        except Exception as exc:
            v.failed.append(f"the sensor tick raised {type(exc).__name__}: {str(exc)[:200]}")
            requested = []
        v.need(other in requested and job not in requested, f"sensor requested {requested}")
        result = _materialize(other, box, wh)
        v.need(result.success, f"partition {other}'s run failed: {_failure(result)[:200]}")
        before = state(wh)
        result = _materialize(job, box, wh)
        v.need(
            not result.success and says in _failure(result),
            f"partition {job}: {_failure(result)[:200] or 'succeeded'}",
        )
        v.unchanged(before, state(wh))
        v.need(other in jobs(wh), f"job {other} not in the warehouse")
        return v

    def dup() -> None:
        (box / "dup").mkdir()
        shutil.copy(BASE, box / "dup" / "rank0.json.gz")
        shutil.copy(BASE, box / "dup.json.gz")

    b.case(
        "inbox",
        "a folder dup/ beside a file dup.json.gz",
        lambda: bad_entry(dup, "dup", "claimed", "alpha"),
    )
    b.case(
        "inbox", "ln -s . inbox/selflink",
        lambda: bad_entry(lambda: (box / "selflink").symlink_to(".", target_is_directory=True), "selflink", "inbox itself", "beta"),
    )  # fmt: skip


# ---------------------------------------------------------------------------- 4. workers / kill


def workers(b: Bench) -> None:
    big = b.tmp / "inputs" / "big"
    padded(big / "j0" / "rank0.json.gz", BIG, 16 << 20)  # a pool of 2 needs 512 MiB of JSON
    for k in range(1, 4):
        (big / f"j{k}").mkdir(parents=True)
        shutil.copy(big / "j0" / "rank0.json.gz", big / f"j{k}" / "rank0.json.gz")
    for sig in (signal.SIGKILL, signal.SIGTERM):
        b.case(
            "workers",
            f"{sig.name} of `lumos ingest <4 big> --workers 2`",
            lambda s=sig: _kill_pool(b, big, s),
        )
    wh = b.warehouse("workers")
    for k in range(6):  # a catalog of a few jobs
        lumos(
            "ingest",
            str(DLRM / sorted(os.listdir(DLRM))[k]),
            "--job",
            f"w{k}",
            "-q",
            "--warehouse",
            str(wh),
        )
    b.case(
        "workers", "a killed catalog build's *.tmp", lambda: _killed_writer(wh, "sql", "select 1")
    )
    b.case(
        "workers",
        "a killed replay's *.tmp",
        lambda: _killed_writer(wh, "replay", "--job", "w0", "-q"),
    )


def _kill_pool(b: Bench, big: Path, sig: signal.Signals) -> Verdict:
    v = Verdict()
    wh = b.tmp / f"wh-pool-{sig.name}"
    t0 = time.monotonic()
    p, out, err = start("ingest", str(big), "--workers", "2", "-q", "--warehouse", str(wh))
    kids: set[int] = set()
    while time.monotonic() - t0 < 60 and running(p):
        kids = descendants(p.pid)
        if len(kids) >= 3 and any((wh / "_staging").glob("run-*/*.events.parquet")):
            break  # two workers and the resource tracker, parsing
        time.sleep(0.02)
    if not v.need(running(p) and len(kids) >= 2, f"no pool seen ({len(kids)} children)"):
        finish(p, out, err, 60, t0)
        return v
    os.kill(p.pid, sig)
    finish(p, out, err, 60, t0)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(k) for k in kids):
        time.sleep(0.1)
    left = [k for k in kids if alive(k)]
    v.need(not left, f"{len(left)} of {len(kids)} children alive 15 s after the parent's end")
    for k in left:
        os.kill(k, signal.SIGKILL)
    v.note(f"{len(kids)} children, all gone" if not left else "")
    v.later_ingest_works(wh, BASE, f"pool-{sig.name}")
    return v


def _killed_writer(wh: Path, *args: str) -> Verdict:
    """Kill -9 a command the moment one of its temporary files exists; the next run of the same
    command leaves none."""
    v = Verdict()
    tries = 0
    for _ in range(5):
        tries += 1
        if args[0] == "sql":  # force a catalog build
            for name in ("lumos.duckdb", ".lumos.duckdb.stamp"):
                (wh / name).unlink(missing_ok=True)
        t0 = time.monotonic()
        p, out, err = start(*args, "--warehouse", str(wh))
        seen = []
        while running(p) and not seen and time.monotonic() - t0 < 120:
            seen = [
                f
                for _, _, fs in os.walk(wh)
                for f in fs
                if f.endswith(".tmp") or f.endswith(".tmp.wal")
            ]
        if seen and running(p):
            os.kill(p.pid, signal.SIGKILL)
        finish(p, out, err, 120, t0)
        left = [f for _, _, fs in os.walk(wh) for f in fs if ".tmp" in f]
        if left:
            break
    if not v.need(bool(left), "no kill left a temporary file behind (5 tries)"):
        return v
    again = lumos(*args, "--warehouse", str(wh), timeout=300)
    v.succeeded(again)
    still = [f for _, _, fs in os.walk(wh) for f in fs if ".tmp" in f]
    v.need(not still, f"still there after the next run: {still[:2]}")
    v.note(f"killed with {len(left)} temporary file(s) after {tries} tries")
    return v


# ----------------------------------------------------------------------- 5. readers, compaction

_SNAPSHOT_QUERY = """select count(*) filter (where t.status = 'ok') as ok,
  count(*) filter (where t.status = 'ok' and t.n_events > 0 and e.n is null) as missing
from traces t left join (select job, trace_sha256, count(*) as n from events group by all) e
  on e.job = t.job and e.trace_sha256 = t.sha256"""


def readers(b: Bench) -> None:
    from lumos.api import Warehouse
    from warehouse.layout import Layout

    wh = b.warehouse("readers")
    n_commits = 16 if b.quick else 30  # 16: one compaction at least
    committer = (
        "from lumos.cli import main\n"
        f"for k in range({n_commits}):\n"
        f"    assert main(['ingest', {str(BASE)!r}, '--job', f'c{{k}}', '-q', '--warehouse', {str(wh)!r}]) == 0\n"
    )
    counts = {"cli": [0, 0, 0], "api": [0, 0, 0]}  # queries, failed, saw a row without events
    errors: list[str] = []
    done = threading.Event()

    def tally(path: str, row: dict | None, error: str | None) -> None:
        c = counts[path]
        c[0] += 1
        if error is not None:
            c[1] += 1
            errors.append(f"{path}: {error[:200]}")
        elif row and row["missing"]:
            c[2] += 1

    def cli_reader() -> None:
        while not done.is_set():
            ran = lumos("sql", _SNAPSHOT_QUERY, "--format", "json", "--warehouse", str(wh))
            tally(
                "cli",
                json.loads(ran.out)[0] if ran.rc == 0 else None,
                None if ran.rc == 0 else ran.brief(),
            )

    def api_reader() -> None:
        handle = Warehouse.open(wh)
        while not done.is_set():
            try:
                row = handle.arrow(_SNAPSHOT_QUERY).to_pylist()[0]
                tally("api", row, None)
            except Exception as exc:
                tally("api", None, f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=f) for f in (cli_reader, api_reader)]
    for t in threads:
        t.start()
    parts_seen = []
    proc = subprocess.Popen(
        [sys.executable, "-c", committer], cwd=ROOT, env=lumos_env(), stdout=subprocess.DEVNULL
    )
    layout = Layout.at(wh)
    while proc.poll() is None:
        parts_seen.append(len(layout.manifest_parts()))  # live parts (merged-away ones kept)
        time.sleep(0.05)
    done.set()
    for t in threads:
        t.join()
    drops = sum(1 for a, c in zip(parts_seen, parts_seen[1:], strict=False) if c < a)
    b.scaled.append(f"readers: {n_commits} commits (the issue had 60), {drops} compaction(s) seen")

    def verdict(path: str) -> Verdict:
        v = Verdict()
        v.need(proc.returncode == 0, f"the committing process exited {proc.returncode}")
        q, failed, _ = counts[path]
        v.need(q > 0, "no query ran")
        v.need(
            failed == 0,
            f"{failed} of {q} queries failed: {[e for e in errors if e.startswith(path)][:1]}",
        )
        v.note(f"{q} queries")
        return v

    def snapshot() -> Verdict:
        v = Verdict()
        for path, (q, _, missing) in counts.items():
            v.need(
                missing == 0,
                f"{missing} of {q} {path} queries saw an ok `traces` row without its events",
            )
        return v

    b.case(
        "readers",
        "no `lumos sql` query fails during commits and compactions",
        lambda: verdict("cli"),
        True,
    )
    b.case(
        "readers",
        "no Warehouse.arrow query fails during commits and compactions",
        lambda: verdict("api"),
        True,
    )
    b.case(
        "readers", "every query sees one snapshot (no ok row without its events)", snapshot, True
    )


# ------------------------------------------------------------------------- 6. unbounded input


def unbounded(b: Bench) -> None:
    wh = b.warehouse("unbounded")
    blanks = (64 << 20) if b.quick else (5 << 30)
    giant = (80 << 20) if b.quick else (300 << 20)
    if b.quick:
        b.scaled.append("unbounded: 64 MiB of blanks (the issue: 5 GB), an 80 MiB string (300 MB)")

    def ingest_bounded(path: Path, job: str, ok: bool, says: str, rss_mb: float) -> Verdict:
        v = Verdict()
        before = state(wh)
        ran = lumos("ingest", str(path), "--job", job, "-q", "--warehouse", str(wh), timeout=120)
        (v.succeeded if ok else v.refused)(ran, says)
        v.need(ran.max_rss_mb < rss_mb, f"peak RSS {ran.max_rss_mb:,.0f} MB >= {rss_mb:,.0f} MB")
        v.note(
            f"{path.stat().st_size / 1e6:.1f} MB file, {ran.wall_s:.1f} s, peak RSS {ran.max_rss_mb:,.0f} MB"
        )
        if not ok:
            v.need(len(state(wh).rows) == len(before.rows) + 1, "not one refused manifest row")
        v.later_ingest_works(wh, BASE, job)
        return v

    ws = b.tmp / "inputs" / "blanks.json.gz"
    b.case(
        "unbounded", f"{blanks >> 20:,} MiB of whitespace inside traceEvents",
        lambda: ingest_bounded(blanks_between_events(ws, b.doc, blanks), "blanks", True, "1 ingested", 600), True,
    )  # fmt: skip
    ws.unlink(missing_ok=True)
    gs = b.tmp / "inputs" / "giant.json.gz"
    b.case(
        "unbounded", f"a string of {giant >> 20} MiB",
        lambda: ingest_bounded(giant_string(gs, b.doc, giant), "giant", False, "runs past", 800), True,
    )  # fmt: skip

    def max_rows() -> Verdict:
        v = Verdict()
        ran = lumos("sql", "select * from events", "--max-rows", "10", "--warehouse", str(wh))
        v.succeeded(ran)
        rows = [ln for ln in ran.out.splitlines() if ln.strip()]
        v.need(len(rows) <= 1 + 10 + 1, f"printed {len(rows)} lines")
        return v

    b.case("unbounded", "lumos sql --max-rows 10", max_rows)
    b.case(
        "unbounded",
        "select * from events, table and csv, 4 copies of the biggest trace",
        lambda: _big_select(b),
    )
    ran = lumos("ingest", str(GPT_CPU), "-q", "--warehouse", str(wh))
    if ran.rc != 0:
        raise RuntimeError(f"ingesting {GPT_CPU}: {ran.brief()}")

    # a first estimate writes the job's template cache (estimate_templates/): not a change
    warm = lumos("estimate", "--job", "gpt_cpu", "--set", "layers=4", "--warehouse", str(wh))
    if warm.rc != 0:
        raise RuntimeError(f"a first estimate: {warm.brief()}")

    def estimate(s: str, says: str) -> Verdict:
        v = Verdict()
        before = state(wh)
        ran = lumos("estimate", "--job", "gpt_cpu", "--set", s, "--warehouse", str(wh), timeout=60)
        v.refused(ran, says)
        v.need(ran.max_rss_mb < 1000, f"peak RSS {ran.max_rss_mb:,.0f} MB")
        v.unchanged(before, state(wh))
        return v

    b.case(
        "unbounded",
        "estimate --set layers=140000",
        lambda: estimate("layers=140000", "at most 5,000,000"),
        True,
    )
    b.case(
        "unbounded",
        "estimate --set speedup.all=1e308",
        lambda: estimate("speedup.all=1e308", "between 1/1000 and 1000"),
    )
    b.case("unbounded", "estimate --set vocab=0", lambda: estimate("vocab=0", "vocab"), True)

    def sweep(grid: str, ok: bool, says: str) -> Verdict:
        v = Verdict()
        path = b.tmp / "inputs" / "grid.yaml"
        path.write_text(grid)
        before = state(wh)
        ran = lumos(
            "sweep",
            "--job",
            "gpt_cpu",
            "--grid",
            str(path),
            "--no-write",
            "--warehouse",
            str(wh),
            timeout=90,
        )
        (v.succeeded if ok else v.refused)(ran, says)
        v.need(ran.max_rss_mb < 1000, f"peak RSS {ran.max_rss_mb:,.0f} MB")
        v.note(f"{ran.wall_s:.1f} s")
        v.unchanged(before, state(wh))
        return v

    axis = list(range(1, 1001))
    b.case(
        "unbounded",
        "a grid constraint 10**10**10 > 1",
        lambda: sweep("grid:\n  layers: [2]\nconstraints:\n  - 10**10**10 > 1\n", True, "layers=2"),
    )
    b.case(
        "unbounded",
        "a grid of 1,000,000 points",
        lambda: sweep(
            f"grid: {{layers: {axis}, micro_batch: {axis}}}\n", False, "1,000,000 points"
        ),
    )


def _big_select(b: Bench) -> Verdict:
    v = Verdict()
    wh = b.tmp / "wh-big"
    for k in range(4):
        ran = lumos(
            "ingest", str(BIG), "--job", f"big{k}", "-q", "--warehouse", str(wh), timeout=180
        )
        if not v.need(ran.rc == 0, f"setting up: {ran.brief()}"):
            return v
    n = sql_rows(wh, "select count(*) as n from events")[0]["n"]
    b.scaled.append(f"unbounded: select * over {n:,} events (the issue: 2M)")
    for fmt in ("table", "csv"):
        ran = lumos(
            "sql", "select * from events", "--format", fmt, "--warehouse", str(wh), timeout=300
        )
        v.succeeded(ran)
        v.need(ran.max_rss_mb < 1500, f"{fmt}: peak RSS {ran.max_rss_mb:,.0f} MB")
        v.note(
            f"{fmt}: {ran.out_bytes / 1e6:,.1f} MB out, peak RSS {ran.max_rss_mb:,.0f} MB, {ran.wall_s:.1f} s"
        )
    shutil.rmtree(wh)
    return v


# ------------------------------------------------------------------------------ 7. silent skips


def skips(b: Bench) -> None:
    wh = b.warehouse("skips")
    # the permission cases need a user that permissions stop (root reads anything)
    cache = b.tmp / "numba-nobody"
    shutil.copytree(
        os.environ.get("NUMBA_CACHE_DIR", ROOT / ".numba_cache"), cache, dirs_exist_ok=True
    )
    nobody = {"NUMBA_CACHE_DIR": str(cache)}
    for p in [cache, *cache.rglob("*")]:
        os.chown(p, NOBODY, NOBODY)
    dlrm = sorted(DLRM.iterdir())

    def as_nobody(make: Callable[[Path], list[Path]], says: str, n_ok: int, tag: str) -> Verdict:
        v = Verdict()
        root = b.tmp / "inputs" / tag
        root.mkdir(parents=True)
        hidden = make(root)
        mine = b.tmp / f"wh-{tag}"
        mine.mkdir()
        os.chown(mine, NOBODY, NOBODY)
        ran = lumos(
            "ingest", str(root), "-q", "--warehouse", str(mine / "wh"), uid=NOBODY, env=nobody
        )
        for p in hidden:
            p.chmod(0o755)
        v.no_traceback(ran)
        v.need(ran.rc == 1, f"not exit 1 ({ran.brief()})")
        v.need(
            says in ran.text and str(hidden[0]) in ran.text,
            f"does not name {hidden[0].name}: {says!r} ({ran.brief()})",
        )
        got = sum(jobs(mine / "wh").values()) if (mine / "wh" / "manifest").exists() else 0
        v.need(got == n_ok, f"{got} files ingested of the {n_ok} readable")
        return v

    def unreadable_file(root: Path) -> list[Path]:
        for k in range(3):
            shutil.copy(dlrm[k], root / dlrm[k].name)
        (root / dlrm[0].name).chmod(0)
        return [root / dlrm[0].name]

    def unreadable_folder(root: Path) -> list[Path]:
        for sub in ("a", "b"):
            (root / sub).mkdir()
            shutil.copy(dlrm[0], root / sub / "rank0.json.gz")
        (root / "a").chmod(0)
        return [root / "a"]

    b.case(
        "skips",
        "an unreadable file among others",
        lambda: as_nobody(unreadable_file, "ermission", 2, "unreadable-file"),
        True,
    )
    b.case(
        "skips",
        "an unreadable sub-folder",
        lambda: as_nobody(unreadable_folder, "", 1, "unreadable-folder"),
    )

    def linked() -> Verdict:
        v = Verdict()
        root = b.tmp / "inputs" / "linked"
        root.mkdir()
        (root / "real").symlink_to(DLRM, target_is_directory=True)
        ran = lumos("ingest", str(root), "-q", "--warehouse", str(wh))
        v.succeeded(ran)
        v.need(jobs(wh).get("linked/real") == len(dlrm), f"jobs: {jobs(wh)}")
        return v

    b.case("skips", "a symlinked sub-folder", linked)

    def unwritable() -> Verdict:
        v = Verdict()
        before = state(wh)
        ran = lumos(
            "ingest", str(BASE), "--job", "x", "-q", "--warehouse", str(wh), uid=NOBODY, env=nobody
        )
        v.refused(ran, str(wh))
        v.unchanged(before, state(wh))
        return v

    b.case("skips", "a warehouse the user cannot write", unwritable)
    doc = b.doc
    refused = [
        ("{'traceEvents': []}", "empty.json.gz", {**doc, "traceEvents": []}, "no events"),
        ("distributedInfo.rank 'three'", "three.json.gz", {**doc, "distributedInfo": {**doc["distributedInfo"], "rank": "three"}}, "not an integer"),
    ]  # fmt: skip

    def refuse(path: Path, says: str, tag: str) -> Verdict:
        v = Verdict()
        before = state(wh)
        ran = lumos("ingest", str(path), "--warehouse", str(wh))
        v.refused(ran, says, path.name)
        v.need("UTF-16" not in ran.text, "called UTF-16")
        v.need(len(state(wh).rows) == len(before.rows) + 1, "not one refused manifest row")
        again = lumos("ingest", str(path), "--warehouse", str(wh))
        v.need(
            "1 refused" in again.text and "0 unchanged" in again.text,
            f"ingested again: {again.brief()}",
        )
        v.later_ingest_works(wh, BASE, tag)
        return v

    for k, (name, file, d, says) in enumerate(refused):
        b.case(
            "skips", name, lambda f=file, d=d, s=says, k=k: refuse(b.file(f, d), s, f"r{k}"), k == 1
        )
    zeros = b.tmp / "inputs" / "zeros.json.gz"
    import gzip

    zeros.write_bytes(gzip.compress(bytes(1 << 16)))
    b.case(
        "skips",
        "gzip of zeros; the summary counts it once when refused again",
        lambda: refuse(zeros, "zero", "r3"),
    )


# ------------------------------------------------------------------------------- 8. durability

_FSYNC_TRACKER = """
import json, os, sys
from pathlib import Path
wh = Path(sys.argv[1]); log = []; real = os.fsync
def fsync(fd):
    log.append((os.readlink(f"/proc/self/fd/{fd}"), len(list((wh / "manifest").glob("part-*.parquet")))))
    real(fd)
os.fsync = fsync
from lumos.cli import main
rc = main(["ingest", sys.argv[2], "--job", "d", "-q", "--warehouse", str(wh)])
print(json.dumps({"rc": rc, "synced": log}))
"""


def durability(b: Bench) -> None:
    wh = b.tmp / "wh-durability"
    run = subprocess.run(
        [sys.executable, "-c", _FSYNC_TRACKER, str(wh), str(BASE)],
        cwd=ROOT, env=lumos_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    log = json.loads(run.stdout.splitlines()[-1])
    synced = [(p, n) for p, n in log["synced"]]

    def before_manifest(pick: Callable[[str], bool], what: str) -> Callable[[], Verdict]:
        def check() -> Verdict:
            v = Verdict()
            v.need(log["rc"] == 0, f"the ingest exited {log['rc']}")
            v.need(
                any(pick(p) and n == 0 for p, n in synced),
                f"{what} not fsync'd before the manifest part",
            )
            return v

        return check

    b.case("durability", "the events file is fsync'd before its manifest row",
           before_manifest(lambda p: "_staging" in p and p.endswith(".events.parquet"), "the staged events file"), True)  # fmt: skip
    b.case("durability", "the trace_meta file is fsync'd before its manifest row",
           before_manifest(lambda p: "_staging" in p and p.endswith(".meta.parquet"), "the staged trace_meta file"), True)  # fmt: skip
    b.case("durability", "the folders the renames wrote are fsync'd before it",
           before_manifest(lambda p: "/events/job=" in p and "/rank=" in p and not p.endswith(".parquet"), "the events folder"), True)  # fmt: skip


# ------------------------------------------------------------------- concurrency and kill -9


def concurrency(b: Bench) -> None:
    from tests.warehouse_checks import assert_clean, assert_consistent, manifest_rows

    src = b.tmp / "inputs" / "fleet"
    shutil.copytree(DLRM, src / "dlrm")
    (src / "nccl").mkdir()
    shutil.copy(NCCL, src / "nccl" / "rank0.json.gz")

    def rows(wh: Path) -> list[tuple]:
        return sorted(
            (r["job"], r["rank"], r["sha256"], r["status"], r["n_events"])
            for r in manifest_rows(wh)
        )

    def concurrent() -> Verdict:
        v = Verdict()
        single = b.tmp / "wh-single"
        v.succeeded(lumos("ingest", str(src), "-q", "--warehouse", str(single)))
        many = b.tmp / "wh-concurrent"
        t0 = time.monotonic()
        procs = [start("ingest", str(src), "-q", "--warehouse", str(many)) for _ in range(3)]
        for ran in [finish(*p, 300, t0) for p in procs]:
            v.succeeded(ran)
        got, want = rows(many), rows(single)
        v.need(got == want, f"{len(got)} manifest rows, a single ingest has {len(want)}")
        try:
            v.need(assert_consistent(many) == len(want), "not every file committed")
            assert_clean(many)
        except AssertionError as exc:
            v.failed.append(f"not whole: {str(exc)[:200]}")
        v.note(f"3 processes, {len(want)} files, 0 duplicates" if v.handled else "")
        return v

    b.case("concurrency", "3 concurrent ingests of the same 9 files", concurrent, True)
    # six jobs of one rank, plus one trace of 6x the events (a longer parse): kill -9 anywhere
    many = b.tmp / "inputs" / "many"
    doc = load(NCCL)
    for k in range(6):
        (many / f"job{k}").mkdir(parents=True)
        shutil.copy(NCCL, many / f"job{k}" / "rank0.json.gz")
    write_gz(many / "jobbig" / "big.json.gz", {**doc, "traceEvents": doc["traceEvents"] * 6})
    t0 = time.monotonic()
    full = lumos("ingest", str(many), "-q", "--warehouse", str(b.tmp / "wh-kill-timing"))
    span = time.monotonic() - t0
    if full.rc != 0:
        raise RuntimeError(f"timing ingest: {full.brief()}")
    rng = random.Random(34)
    kills = 1 if b.quick else 10
    for k in range(kills):
        at = rng.uniform(0.3, span)

        def killed(at: float = at, k: int = k) -> Verdict:
            """A fresh warehouse, its ingest killed at `at` s; then the same ingest again."""
            v = Verdict()
            wh = b.tmp / f"wh-kill-{k}"
            t = time.monotonic()
            p, out, err = start("ingest", str(many), "-q", "--warehouse", str(wh))
            time.sleep(at)
            was_running = running(p)
            if was_running:
                os.kill(p.pid, signal.SIGKILL)
            finish(p, out, err, 60, t)
            try:
                # one copy of each committed file, each with all its events
                committed = assert_consistent(wh) if (wh / "manifest").exists() else 0
                again = lumos("ingest", str(many), "-q", "--warehouse", str(wh))
                v.succeeded(again, f"{committed} unchanged")
                v.need(assert_consistent(wh) == 7, "not all 7 files committed after it")
                assert_clean(wh)  # no orphan data file, no staging leftover, no *.tmp
            except AssertionError as exc:
                v.failed.append(f"duplicates, partial rows or orphans: {str(exc)[:200]}")
            v.note(f"{committed} of 7 committed at the kill" if was_running else "ended before")
            shutil.rmtree(wh, ignore_errors=True)
            return v

        b.case("concurrency", f"kill -9 at {at:.2f} s of a {span:.1f} s ingest", killed, True)


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
        print("\nscaled down (the size is not what the case tests):")
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
        print("torture: not root: the permission cases run as the current user", file=sys.stderr)
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
