"""Torture cases of what users hand the warehouse: hostile job names (item 1), `lumos sql`
statements that write or read outside it (item 2), bad inbox entries (item 3), files that were
skipped without a word (item 7)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from torture_bench import BASE, DLRM, NOBODY, Bench, failure, jobs, materialize, sql_rows
from torture_checks import ROOT, Verdict, lumos, state

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
        result = materialize(job, inbox, wh)
        v.need(result.success, f"partition {job[:12]}…'s run failed: {failure(result)[:200]}")
    v.need(set(jobs(wh)) == {"数据" * 14, "other"}, f"jobs {sorted(jobs(wh))}")
    return v


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
        result = materialize(other, box, wh)
        v.need(result.success, f"partition {other}'s run failed: {failure(result)[:200]}")
        before = state(wh)
        result = materialize(job, box, wh)
        v.need(
            not result.success and says in failure(result),
            f"partition {job}: {failure(result)[:200] or 'succeeded'}",
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


# ------------------------------------------------------------------------------ 7. silent skips


def skips(b: Bench) -> None:
    wh = b.warehouse("skips")
    # the permission cases need a user that permissions stop (root reads anything)
    cache = b.tmp / "numba-nobody"
    shutil.copytree(
        os.environ.get("NUMBA_CACHE_DIR", ROOT / ".numba_cache"), cache, dirs_exist_ok=True
    )
    nobody = {"NUMBA_CACHE_DIR": str(cache)}
    as_root = os.geteuid() == 0
    for p in [cache, *cache.rglob("*")] if as_root else []:
        os.chown(p, NOBODY, NOBODY)
    dlrm = sorted(DLRM.iterdir())

    def nobody_case(name: str, run: Callable[[], Verdict], quick: bool = False) -> None:
        if as_root:
            b.case("skips", name, run, quick)
        else:
            b.scaled.append(f"skips: {name!r} not tried: it runs as user nobody, which needs root")

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

    nobody_case(
        "an unreadable file among others",
        lambda: as_nobody(unreadable_file, "ermission", 2, "unreadable-file"),
        True,
    )
    nobody_case(
        "an unreadable sub-folder", lambda: as_nobody(unreadable_folder, "", 1, "unreadable-folder")
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

    nobody_case("a warehouse the user cannot write", unwritable)
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
