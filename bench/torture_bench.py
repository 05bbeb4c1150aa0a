"""What every torture case shares: the inputs (one real trace of ../shared), the scratch folder,
the cases run so far with their verdicts, and the reads of a warehouse through `lumos sql`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from torture_checks import ROOT, Verdict, lumos
from torture_inputs import load, write_gz

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


def materialize(job: str, inbox: Path, wh: Path):  # noqa: ANN202
    """One partition's ingest run on a fresh Dagster instance; its console log (a failing
    run's traceback among it) kept out of the bench's output."""
    from pipelines.assets.ingest import trace_events
    from tests.dagster_run import materialize_job

    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        return materialize_job([trace_events], job, inbox, wh, raise_on_error=False)


def failure(result) -> str:  # noqa: ANN001
    return " ".join(
        str(e.event_specific_data.error.message)
        for e in result.all_events
        if e.is_step_failure and e.event_specific_data.error
    )
