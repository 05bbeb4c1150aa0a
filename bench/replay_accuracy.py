"""Replay accuracy on the shared real traces: the table of docs/replay.md ('Accuracy measured').

Ingests each trace as its own job into a temporary warehouse (plus rank 0 of the 8-rank DLRM job
alone, a job traced on one of its ranks), replays it, and prints per job and metric the model
replay's median/max error over complete steps, the identity replay's max, the unexplained slack
(kept as measured external waits) and their median share of the metric, with their main cause.

    python bench/replay_accuracy.py [--shared DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TRACES = {
    "nccl_data": "hta/nccl_parser_config/nccl_data.json.gz",
    "ns_resolution": "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "df_index_resolver": "hta/df_index_resolver/df_index_resolver.json.gz",
    "dlrm 8 ranks": "param/dlrm_8rank/kineto",
    "resnet50 legacy": "kineto/resnet50_legacy_2021.pt.trace.json.gz",
    "trace_diff/control": "hta/trace_diff/control/control.json.gz",
    "trace_diff/test": "hta/trace_diff/test/test.json.gz",
    "sampled_rank-0": "hta/trace_filter/sampled_rank-0.json.gz",
    "sampled_rank-1": "hta/trace_filter/sampled_rank-1.json.gz",
}
ONE_RANK = "dlrm rank 0 alone"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    args = ap.parse_args()

    from lumos.replay.run import job_collectives, replay_job
    from warehouse.catalog import connect
    from warehouse.ingest import ingest

    traces = args.shared / "traces"
    with tempfile.TemporaryDirectory() as tmp:
        wh = Path(tmp) / "wh"
        for job, rel in TRACES.items():
            ingest([traces / rel], warehouse=wh, job=job, build_catalog=False)
        one = Path(tmp) / "one"
        one.mkdir()
        r0 = next((traces / TRACES["dlrm 8 ranks"]).glob("worker0_*"))
        shutil.copy(r0, one / r0.name)
        ingest([one], warehouse=wh, job=ONE_RANK)
        con = connect(str(wh / "lumos.duckdb"), read_only=True)
        print(
            f"{'job':<20} {'mode':<9} {'metric':<9} {'steps':>5} {'model med/max %':>16} "
            f"{'identity max %':>15} {'slack ms / n':>14} {'ext wait %':>10} cause"
        )
        for job in [*TRACES, ONE_RANK]:
            t0 = time.perf_counter()
            res = replay_job(con, job, collectives=job_collectives(wh, con, job))
            rows = res.tables["replay_quality"].to_pylist()
            ident = {(r["rank"], r["metric"]): r for r in rows if r["mode"] == "identity"}
            by: dict[tuple[str, str], list[dict]] = {}
            for r in rows:
                if r["mode"] != "identity":
                    by.setdefault((r["mode"], r["metric"]), []).append(r)
            for (mode, metric), rs in sorted(by.items()):
                med = max(r["median_rel_error"] for r in rs)
                mx = max(r["max_rel_error"] for r in rs)
                idm = [ident[(r["rank"], metric)]["max_rel_error"] for r in rs if mode == "model"]
                slack = sum((r["unexplained_slack_ns"] or 0) for r in rs) / 1e6
                n = sum((r["n_unexplained"] or 0) for r in rs)
                share = max((r["ext_wait_share"] or 0) for r in rs)
                cause = max(rs, key=lambda r: r["ext_wait_share"] or 0)["wait_cause"] or "-"
                print(
                    f"{job:<20} {mode:<9} {metric:<9} {rs[0]['n_steps']:>5} "
                    f"{100 * med:>7.2f}/{100 * mx:<8.2f} "
                    f"{(f'{100 * max(idm):.2f}' if idm else '-'):>15} "
                    f"{f'{slack:.1f} / {n}':>14} {100 * share:>10.2f} {cause}"
                )
            print(f"# {job}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        con.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
