"""Collectives across ranks: match, align clocks, split each kernel into waiting and transfer.

`build_collectives` extracts every NCCL/RCCL kernel (`lumos_sql/collectives/extract.sql`),
matches the k-th collective of a process group on every member (issue order, never timestamps
across ranks), solves each rank's clock offset by alternating medians, and splits each kernel
into ``wait = clamp(last arrival - own start, 0, dur)`` and transfer. The result is the
`collectives` table (`warehouse.schema.COLLECTIVES`); `collective_arrays` turns it into the
``coll`` / ``dur_ns`` arrays of a multi-rank `kernels.graph.ReplayGraph`. The steps in full:
docs/collectives.md, "Module notes".
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

import lumos_sql
from warehouse.catalog import connect as catalog_connect
from warehouse.catalog import job_events_view
from warehouse.layout import SCHEMA_FILE, Layout, empty_table, encode_job, write_parquet_atomic
from warehouse.schema import COLLECTIVES

__all__ = [
    "CollectiveArrays",
    "CollectiveError",
    "build_collectives",
    "write_collectives",
    "clock_offsets",
    "collective_arrays",
    "collectives_file",
    "extract_collectives",
    "match_collectives",
]

MATCHED, PARTIAL, SINGLE, UNMATCHED, P2P = "matched", "partial", "single-rank", "unmatched", "p2p"

# Bytes per element of the dtype names found in traces (c10 ScalarType names and the
# `Input type` strings of record_function ops). Unknown names give a null byte count.
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "uint32": 4,
    "double": 8, "float64": 8, "long": 8, "longint": 8, "int64": 8, "uint64": 8,
    "half": 2, "float16": 2, "bfloat16": 2, "short": 2, "int16": 2, "uint16": 2,
    "byte": 1, "char": 1, "bool": 1, "int8": 1, "uint8": 1, "signedchar": 1,
    "unsignedchar": 1, "float8e4m3fn": 1, "float8e5m2": 1,
}  # fmt: skip

_P2P_NAMES = {"send", "recv", "isend", "irecv"}
# Offsets change by less than this between iterations: converged (ns).
_CONVERGED_NS = 1
_MAX_ITER = 50


class CollectiveError(ValueError):
    """The job's collectives cannot be built; the message names the job and the problem."""


def _norm_name(name: object) -> str:
    """Comparable collective name: 'all_to_all', 'alltoall_base', 'AllToAll' -> 'alltoall'."""
    if not isinstance(name, str):
        return ""
    text = re.sub(r"[^a-z0-9]", "", name.lower())
    return text.removesuffix("base")


def _dtype_bytes(dtype: object) -> int | None:
    if not isinstance(dtype, str):
        return None
    return DTYPE_BYTES.get(re.sub(r"[^a-z0-9]", "", dtype.lower()))


def _parse_ranks(text: object) -> list[int] | None:
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return sorted(value)
    return None


# --------------------------------------------------------------------------------------------
# 1. extract


def _connect(warehouse: str | os.PathLike[str]):  # noqa: ANN202 (duckdb is imported lazily)

    from warehouse.handle import WarehouseHandle

    wh = WarehouseHandle.open(warehouse)
    return catalog_connect(str(wh.catalog))


def extract_collectives(
    warehouse: str | os.PathLike[str], job: str
) -> tuple[pd.DataFrame, dict[int, int | None]]:
    """The job's collective ops (one row per kernel per rank) and its ranks -> declared world size.

    Raises CollectiveError when the job has no ingested rank.
    """
    con = _connect(warehouse)
    try:
        ranks = con.sql(lumos_sql.load("collectives/ranks"), params={"job": job}).fetchall()
        if not ranks:
            raise CollectiveError(f"job {job!r}: no ingested trace in warehouse {warehouse}")
        job_events_view(con, job)
        ops = con.sql(lumos_sql.load("collectives/extract"), params={"job": job}).to_arrow_table()
    finally:
        con.close()
    from warehouse.handle import to_pandas

    world = {int(r): (int(w) if w is not None else None) for r, w in ranks}
    return to_pandas(ops), world


# --------------------------------------------------------------------------------------------
# 2. match


def _group_of(pg_name: object, pg_ranks: object) -> tuple[str, list[int] | None]:
    """Group key and member ranks (None: unknown) of a collective's process group."""
    ranks = _parse_ranks(pg_ranks)
    if isinstance(pg_name, str) and pg_name:
        return f"pg={pg_name}", ranks
    if ranks is not None:
        return f"ranks={json.dumps(ranks)}", ranks
    return "default", None


def _align(lists: dict[int, list[tuple]]) -> dict[int, int] | None:
    """Shift of each rank's list against the longest one, if exactly one agrees everywhere.

    A rank's list must be a contiguous run of the reference's (profiling windows of the ranks
    start and stop at slightly different collectives); its j-th entry is the reference's
    (j + shift)-th. Returns None when some rank has no such shift, or more than one.
    """
    ref = max(lists, key=lambda r: (len(lists[r]), -r))
    ref_sig = lists[ref]
    shifts: dict[int, int] = {}
    for r, sig in lists.items():
        good = [
            s
            for s in range(len(ref_sig) - len(sig) + 1)
            if all(ref_sig[s + j] == sig[j] for j in range(len(sig)))
        ]
        if len(good) != 1:
            return None
        shifts[r] = good[0]
    return shifts


# A collective's index when matched by step: its step's number times this, plus its place in the
# step (no step issues a million collectives of one group).
_STEP_STRIDE = 1 << 20


def _by_step(grp: pd.DataFrame, here: list[int]) -> pd.Series | None:
    """Match a group's collectives by ProfilerStep number and order within the step, when the
    order alone fits several alignments (a periodic sequence whose ranks' windows start a step
    apart) or none. The profiler numbers steps by its calls to `step()`, the same on every rank
    of an SPMD job: the k-th collective of step N on one member is the k-th of step N on every
    other. A step counts only where every member traced it with the same signatures (name,
    elements); the collectives of other steps get indices no other rank shares (unmatched).
    None when some collective lies outside every step or no step agrees."""
    if "step" not in grp or grp["step"].isna().any():
        return None
    step = grp["step"].astype("int64")
    rank = grp["rank"].astype(int)
    k = grp.groupby([rank, step]).cumcount()
    sig = [
        (n, None if pd.isna(e) else int(e))
        for n, e in zip(grp["_norm"], grp["in_nelems"], strict=True)
    ]
    per: dict[tuple[int, int], list] = {}
    for r, n, s_ in zip(rank, step, sig, strict=True):
        per.setdefault((n, r), []).append(s_)
    agree = {
        n
        for n in set(step)
        if all((n, r) in per for r in here) and all(per[(n, r)] == per[(n, here[0])] for r in here)
    }
    if not agree:
        return None
    index = step * _STEP_STRIDE + k
    # outside the agreeing steps: an index of this rank's alone (negative, never matched)
    alone = ~step.isin(agree)
    index[alone] = -(rank[alone].astype("int64") * _STEP_STRIDE * _STEP_STRIDE + index[alone]) - 1
    return index


def match_collectives(ops: pd.DataFrame, world: dict[int, int | None]) -> pd.DataFrame:
    """Add group_key, group_ranks, coll_index, n_participants and status to `ops`.

    `world` maps each rank of the job present in the warehouse to its declared world size.
    """
    df = ops.copy()
    present = set(world)
    world_size = max((w for w in world.values() if w), default=None)
    default = json.dumps(list(range(world_size)) if world_size else sorted(present))
    # few distinct (pg_name, pg_ranks) pairs: resolve each once, not once per row
    cols = df[["pg_name", "pg_ranks"]].astype(object)
    pairs = cols.where(cols.notna(), None)
    resolved: dict[tuple, tuple[str, str]] = {}
    keys, members = [], []
    for pair in zip(pairs["pg_name"], pairs["pg_ranks"], strict=True):
        if pair not in resolved:
            key, ranks = _group_of(pair[0], pair[1])
            resolved[pair] = (key, default if ranks is None else json.dumps(ranks))
        keys.append(resolved[pair][0])
        members.append(resolved[pair][1])
    df["group_key"] = pd.Series(keys, index=df.index, dtype=object)
    df["group_ranks"] = pd.Series(members, index=df.index, dtype=object)
    df["coll_index"] = pd.Series(pd.NA, index=df.index, dtype="Int64")
    df["n_participants"] = pd.Series(pd.NA, index=df.index, dtype="Int64")
    df["status"] = pd.Series(UNMATCHED, index=df.index, dtype=object)
    df["_norm"] = df["coll_name"].map(_norm_name)

    p2p = df["_norm"].isin(_P2P_NAMES)
    df.loc[p2p, "status"] = P2P
    for (_key, ranks_json), grp in df[~p2p].groupby(["group_key", "group_ranks"], sort=False):
        expected = set(json.loads(ranks_json))
        here = sorted(expected & present) or sorted(set(grp["rank"].astype(int)))
        df.loc[grp.index, "n_participants"] = len(here)
        # issue order on each rank: the order every member of a communicator must follow
        grp = grp.sort_values(["rank", "issue_ns", "start_ns", "event_idx"])
        if len(here) <= 1:
            df.loc[grp.index, "coll_index"] = grp.groupby("rank").cumcount().to_numpy()
            df.loc[grp.index, "status"] = SINGLE
            continue
        full = PARTIAL if len(here) < len(expected) else MATCHED
        by_step = False
        if grp["seq"].notna().all():
            index = grp["seq"].astype("int64")
        else:
            lists = {r: [] for r in here}
            for r, sub in grp.groupby("rank"):
                if int(r) in lists:
                    lists[int(r)] = [
                        (n, None if pd.isna(e) else int(e))
                        for n, e in zip(sub["_norm"], sub["in_nelems"], strict=True)
                    ]
            local = grp.groupby("rank").cumcount()
            same_len = len({len(v) for v in lists.values()}) == 1
            shifts = {r: 0 for r in lists} if same_len else None
            if same_len and any(lists[r] != lists[here[0]] for r in here):
                shifts = None  # same counts, different content: try a shifted alignment
            if shifts is None:
                shifts = _align(lists) if all(lists.values()) else None
            if shifts is None:
                index = _by_step(grp, here)
                by_step = index is not None
                if index is None:
                    df.loc[grp.index, "coll_index"] = local.to_numpy()
                    continue  # stays UNMATCHED: counts or signatures disagree with no unique fix
            else:
                index = local + grp["rank"].astype(int).map(shifts).fillna(0).astype("int64")
        df.loc[grp.index, "coll_index"] = index.to_numpy()
        # a collective is matched when every participant present holds it exactly once
        have = grp.assign(_k=index.to_numpy()).groupby("_k")["rank"].agg(["nunique", "size"])
        complete = have.index[(have["nunique"] == len(here)) & (have["size"] == len(here))]
        ok = np.isin(index.to_numpy(), complete.to_numpy()) & grp["rank"].isin(here).to_numpy()
        df.loc[grp.index[ok], "status"] = full
        if by_step:  # the unmatched keep their place on their rank, not a step's index
            df.loc[grp.index[~ok], "coll_index"] = local.to_numpy()[~ok]
    return df.drop(columns="_norm")


# --------------------------------------------------------------------------------------------
# 3. clock offsets


def clock_offsets(
    coll_id: np.ndarray, rank: np.ndarray, end_ns: np.ndarray
) -> tuple[dict[int, int], dict[int, int]]:
    """Per-rank clock offsets from the end times of matched collectives.

    Inputs are parallel arrays: one entry per participant (collective id, rank, raw end in ns).
    Returns ``(offset, ref)``: ``offset[r]`` such that ``end - offset[r]`` is on the clock of
    ``ref[r]``, the lowest rank of r's connected component (ranks linked through shared
    collectives); that rank has offset 0, and so does a rank that shares no collective.

    Model: ``end[c, r] = T[c] + offset[r] + e``. Solved by alternating medians,
    ``T[c] = median_r(end - offset)`` and ``offset[r] = median_c(end - T)``, started from
    medians of pairwise end differences along a BFS tree of the component. Medians rather than
    least squares because the noise is not Gaussian: an all-to-all's participants may finish
    tens of µs apart when the traffic is uneven, and a rank sometimes ends one collective late
    (a descheduled proxy thread); a median ignores such outliers, a mean spreads them over every
    rank. The result is exactly equivariant: shifting one rank's timestamps by d shifts its
    offset by d and changes nothing else.
    """
    coll_id = np.asarray(coll_id, np.int64)
    rank = np.asarray(rank, np.int64)
    end_ns = np.asarray(end_ns, np.int64)
    if not (coll_id.shape == rank.shape == end_ns.shape):
        raise CollectiveError("clock_offsets: coll_id, rank and end_ns differ in length")
    by_coll: dict[int, dict[int, int]] = defaultdict(dict)
    for c, r, e in zip(coll_id.tolist(), rank.tolist(), end_ns.tolist(), strict=True):
        by_coll[c][r] = e
    # medians run in float64, exact only well below 2**53 ns: each collective's ends are taken
    # relative to its earliest one (offsets only depend on differences within a collective)
    for c, ends in by_coll.items():
        base = min(ends.values())
        by_coll[c] = {r: e - base for r, e in ends.items()}
    by_rank: dict[int, dict[int, int]] = defaultdict(dict)
    for c, ends in by_coll.items():
        for r, e in ends.items():
            by_rank[r][c] = e

    # pairwise end differences between ranks sharing collectives
    pair: dict[tuple[int, int], list[int]] = defaultdict(list)
    for ends in by_coll.values():
        rs = sorted(ends)
        for i, a in enumerate(rs):
            for b in rs[i + 1 :]:
                pair[(a, b)].append(ends[b] - ends[a])
    nbrs: dict[int, list[int]] = defaultdict(list)
    for a, b in pair:
        nbrs[a].append(b)
        nbrs[b].append(a)

    offset: dict[int, float] = {}
    ref: dict[int, int] = {}
    for root in sorted(by_rank):
        if root in offset:
            continue
        offset[root], ref[root] = 0.0, root
        comp, todo = [root], deque([root])
        while todo:
            a = todo.popleft()
            for b in sorted(nbrs[a]):
                if b in offset:
                    continue
                diffs = pair[(a, b)] if a < b else [-d for d in pair[(b, a)]]
                offset[b], ref[b] = offset[a] + float(np.median(diffs)), root
                comp.append(b)
                todo.append(b)
        _refine(by_coll, by_rank, offset, comp, root)
    return {r: round(o) for r, o in offset.items()}, ref


def _refine(
    by_coll: dict[int, dict[int, int]],
    by_rank: dict[int, dict[int, int]],
    offset: dict[int, float],
    comp: list[int],
    root: int,
) -> None:
    if len(comp) < 2:
        return
    members = set(comp)
    colls = [c for c, ends in by_coll.items() if len(ends) > 1 and set(ends) <= members]
    for _ in range(_MAX_ITER):
        t = {c: float(np.median([e - offset[r] for r, e in by_coll[c].items()])) for c in colls}
        new = {
            r: float(np.median([e - t[c] for c, e in by_rank[r].items() if c in t])) for r in comp
        }
        base = new[root]
        change = max(abs(new[r] - base - offset[r]) for r in comp)
        for r in comp:
            offset[r] = new[r] - base
        if change < _CONVERGED_NS:
            break


# --------------------------------------------------------------------------------------------
# 4. the table


def collectives_file(warehouse: str | os.PathLike[str], job: str) -> Path:
    """Where the job's `collectives` Parquet file lives."""
    return (
        Layout.at(warehouse).root / "collectives" / f"job={encode_job(job)}" / "collectives.parquet"
    )


def build_collectives(
    warehouse: str | os.PathLike[str], job: str, *, write: bool = True
) -> pa.Table:
    """Match, align and split the collectives of `job`; write them (atomically) unless told not.

    Returns a table of schema `warehouse.schema.COLLECTIVES` (0 rows for a job without
    collectives). Raises CollectiveError when the job is not in the warehouse.
    """
    ops, world = extract_collectives(warehouse, job)
    df = match_collectives(ops, world)
    df["end_ns"] = (df["start_ns"] + df["dur_ns"]).astype("int64")

    ok = df["status"].isin([MATCHED, PARTIAL])
    keyed = df.loc[ok, "group_key"].astype(str) + "|" + df.loc[ok, "coll_index"].astype(str)
    codes, _ = pd.factorize(keyed)
    offset, ref = clock_offsets(
        codes, df.loc[ok, "rank"].to_numpy(np.int64), df.loc[ok, "end_ns"].to_numpy(np.int64)
    )
    ranks = df["rank"].astype(int)
    df["offset_ns"] = ranks.map(lambda r: offset.get(r, 0)).astype("int64")
    df["clock_ref_rank"] = ranks.map(lambda r: ref.get(r, r)).astype("int32")
    df["aligned_start_ns"] = df["start_ns"] - df["offset_ns"]
    df["aligned_end_ns"] = df["end_ns"] - df["offset_ns"]

    # wait / transfer split on aligned clocks
    df["_key"] = pd.Series(pd.NA, index=df.index, dtype=object)
    df.loc[ok, "_key"] = keyed
    g = df[ok].groupby("_key")
    last = g["aligned_start_ns"].transform("max")
    # median in float64: relative to the job's first end, or epoch-scale ns lose their last digits
    origin = int(df["aligned_end_ns"].min()) if len(df) else 0
    rel_end = df.loc[ok, "aligned_end_ns"] - origin
    med_end = rel_end.groupby(df.loc[ok, "_key"]).transform("median")
    wait = (last - df.loc[ok, "aligned_start_ns"]).clip(lower=0)
    wait = np.minimum(wait, df.loc[ok, "dur_ns"])
    for col in ("last_arrival_ns", "wait_ns", "transfer_ns", "end_resid_ns", "coll_id"):
        df[col] = pd.Series(pd.NA, index=df.index, dtype="Int64")
    df.loc[ok, "last_arrival_ns"] = last.astype("int64")
    df.loc[ok, "wait_ns"] = wait.astype("int64")
    df.loc[ok, "transfer_ns"] = (df.loc[ok, "dur_ns"] - wait).astype("int64")
    df.loc[ok, "end_resid_ns"] = (rel_end - med_end).round().astype("int64")
    # dense ids in order of first aligned arrival: readable, and stable for a given warehouse
    first = g["aligned_start_ns"].min().sort_values(kind="stable")
    ids = pd.Series(np.arange(len(first), dtype=np.int64), index=first.index)
    df.loc[ok, "coll_id"] = df.loc[ok, "_key"].map(ids).astype("int64")

    df["elem_bytes"] = pd.array(df["dtype"].map(_dtype_bytes), dtype="Int64")
    df["in_bytes"] = df["in_nelems"].astype("Int64") * df["elem_bytes"]
    declared = df["group_size"].astype("Int64")
    sizes = df["group_ranks"].map(lambda t: len(json.loads(t))).astype("Int64")
    df["group_size"] = declared.fillna(sizes)
    df["job"] = job

    table = pa.Table.from_pandas(
        df[[f.name for f in COLLECTIVES]].sort_values(["rank", "start_ns", "event_idx"]),
        schema=COLLECTIVES,
        preserve_index=False,
    )
    if write:
        write_collectives(warehouse, job, table)
    return table


def write_collectives(
    warehouse: str | os.PathLike[str], job: str, table: pa.Table, *, catalog: bool = True
) -> Path:
    """Write the job's `collectives` table (atomically); the first such table also adds the
    catalog's view unless `catalog` is False (the caller rebuilds the catalog itself)."""
    target = collectives_file(warehouse, job)
    marker = target.parent.parent / SCHEMA_FILE
    new_table = not marker.exists()
    if new_table:
        write_parquet_atomic(empty_table(COLLECTIVES), marker)
    write_parquet_atomic(table, target)
    if new_table and catalog:  # the catalog's view reads a glob: needed once, not on every write
        from warehouse.catalog import build_catalog

        build_catalog(warehouse)
    return target


# --------------------------------------------------------------------------------------------
# 5. arrays for the multi-rank replay


@dataclass(frozen=True)
class CollectiveArrays:
    """Per input task: ``coll`` (dense 0..C-1, or -1) and ``dur_ns`` for `ReplayGraph.build`.

    A task gets a collective id only when every participant of its collective is among the
    input tasks; its ``dur_ns`` is then the measured transfer time (the kernel adds the wait
    itself). Other tasks keep ``coll = -1`` and their full traced duration.
    """

    coll: np.ndarray
    dur_ns: np.ndarray
    n_collectives: int


def collective_arrays(
    collectives: pa.Table, rank: np.ndarray, event_idx: np.ndarray
) -> CollectiveArrays:
    """Collective ids and durations for tasks named by (rank, event_idx) of the kernel event.

    `collectives` is the job's table from `build_collectives`. Tasks that are not collective
    kernels of the table get ``coll = -1`` and ``dur_ns = -1`` (the caller keeps its own).
    """
    rank = np.asarray(rank, np.int64)
    event_idx = np.asarray(event_idx, np.int64)
    if rank.shape != event_idx.shape:
        raise CollectiveError("collective_arrays: rank and event_idx differ in length")
    if collectives.num_rows and len(set(collectives.column("job").to_pylist())) > 1:
        raise CollectiveError("collective_arrays: the collectives table holds several jobs")
    t = collectives.select(["rank", "event_idx", "coll_id", "transfer_ns", "dur_ns"]).to_pandas()
    t = t.set_index(["rank", "event_idx"])
    idx = pd.MultiIndex.from_arrays([rank, event_idx])
    hit = t.reindex(idx)
    cid = hit["coll_id"].to_numpy(dtype=float, na_value=np.nan)
    has = ~np.isnan(cid)
    # a collective joins the graph only if all its participants are among the given tasks
    parts = t["coll_id"].dropna().astype(np.int64).value_counts()
    given = pd.Series(cid[has].astype(np.int64)).value_counts()
    complete = given.index[given.to_numpy() == parts.reindex(given.index).to_numpy()]
    use = has.copy()
    use[has] = np.isin(cid[has].astype(np.int64), complete.to_numpy())
    dense = {c: i for i, c in enumerate(sorted(int(c) for c in complete))}
    coll = np.full(rank.shape[0], -1, np.int64)
    coll[use] = [dense[int(c)] for c in cid[use]]
    dur = hit["dur_ns"].to_numpy(dtype=float, na_value=-1).astype(np.int64)
    dur[use] = hit["transfer_ns"].to_numpy(dtype=float, na_value=-1)[use].astype(np.int64)
    return CollectiveArrays(coll=coll, dur_ns=dur, n_collectives=len(dense))
