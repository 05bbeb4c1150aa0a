"""Asset check on each job partition of `job_replay`.

`replay_accuracy` (WARN): the model replay reproduces every measured metric within the bounds the
project holds itself to (median ≤ 1 %, max ≤ 3 % over complete steps). When it does not, the
check names the likely cause from the data: GPU start delays that no dependency explains (kept
as measured external waits, with the cause holding most of their time: peers not traced, an
unmatched stream wait, unknown), or collectives not matched across ranks.
"""

# No `from __future__ import annotations`: Dagster reads the parameter annotations at runtime.

import dagster as dg

from lumos.replay.bounds import cause_words, off_bounds
from pipelines.assets.replay import job_replay
from pipelines.resources import WarehouseResource


def likely_cause(row: dict, unmatched_collectives: int) -> str:
    """A short reason for a high replay error, from the trace's own quality figures."""
    reasons = []
    if row["n_unexplained"]:
        reasons.append(
            f"{row['n_unexplained']} GPU tasks start {row['unexplained_slack_ns'] / 1e6:.2f} ms "
            "later than any dependency explains, kept as external waits "
            f"({100 * (row['ext_wait_share'] or 0):.1f} % of the step; mostly "
            f"{row['wait_cause']}: {cause_words(row['wait_cause'])})"
        )
    if unmatched_collectives:
        reasons.append(f"{unmatched_collectives} collectives not matched across ranks")
    return "; ".join(reasons) or "no trace-quality flag: a timing rule of the model"


@dg.asset_check(asset=job_replay, partitions_def=job_replay.partitions_def)
def replay_accuracy(
    context: dg.AssetCheckExecutionContext, lumos: WarehouseResource
) -> dg.AssetCheckResult:
    import lumos_sql
    from lumos.api import Warehouse
    from warehouse.windows import windows_of

    job = context.partition_key
    wh = Warehouse.open(lumos.location, object_store=True)
    have_collectives = "collectives" in set(
        wh.sql("select view_name from duckdb_views()")["view_name"]
    )
    # the partition's job and its later profiling windows, which its replay step replayed too
    jobs = [job, *windows_of(job, wh.sql(lumos_sql.load("replay/jobs"))["job"])]
    rows, unmatched = [], {}
    for name in jobs:
        rows += wh.sql(lumos_sql.load("pipelines/replay_health"), params={"job": name}).to_dict(
            "records"
        )
        unmatched[name] = (
            int(wh.sql(lumos_sql.load("pipelines/unmatched_collectives"), {"job": name}).iloc[0, 0])
            if have_collectives
            else 0
        )
    bad = [r for r in rows if off_bounds(r)]
    lines = [
        f"{r['job']} rank {r['rank']} {r['metric']}: median {100 * r['median_rel_error']:.2f} %, "
        f"max {100 * r['max_rel_error']:.2f} % ({likely_cause(r, unmatched[r['job']])})"
        for r in bad
    ]
    return dg.AssetCheckResult(
        passed=bool(rows) and not bad,
        severity=dg.AssetCheckSeverity.WARN,
        description="\n".join(lines)
        if lines
        else ("no complete step to judge" if not rows else "within bounds"),
        metadata={"metrics_checked": len(rows), "metrics_out_of_bounds": len(bad)},
    )
