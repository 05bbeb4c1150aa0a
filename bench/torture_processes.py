"""Torture cases of processes killed or racing: pool workers of a killed ingest and temporary
files of a killed writer (item 4), readers during commits and compactions (item 5), the fsync
order (item 8), concurrent ingests and kill -9 at random points."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from torture_bench import BASE, BIG, DLRM, NCCL, Bench
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
)
from torture_inputs import load, padded, write_gz

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
