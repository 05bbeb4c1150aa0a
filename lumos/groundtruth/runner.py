"""Run configurations as real rank processes on loopback (gloo) and write each one's job directory.

Layout of one configuration `OUT/<name>/` (layout "merged", the default):

    measured.json                     configuration, control, every step's time, spreads
    rank-<r>.pt.trace.json.gz         rank r's traced steps, one per profiler cycle (`merge.py`)

Layout "cycles" keeps the profiler's files untouched instead, one job directory per cycle:

    measured.json
    cycle-<k>/rank-<r>.pt.trace.json.gz

docs/groundtruth.md ("Output") says why merged is the default.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from lumos.groundtruth.config import RunConfig, RunControl, host_cores
from lumos.groundtruth.merge import merge_cycles

CYCLE_TRACE = "cycle-{cycle}/rank-{rank}.pt.trace.json.gz"
MERGED_TRACE = "rank-{rank}.pt.trace.json.gz"
LAYOUTS = ("merged", "cycles")


class RunFailed(RuntimeError):
    """A rank process failed or timed out; the message names the configuration and the rank."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spread(values: list[int]) -> dict[str, float | int | None]:
    """min, median, max and coefficient of variation (population stdev / mean) of step times."""
    if not values:
        return {"n": 0, "min": None, "median": None, "max": None, "cv": None}
    mean = statistics.fmean(values)
    return {
        "n": len(values),
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "cv": statistics.pstdev(values) / mean if mean else None,
    }


def profiler_steps(path: str | Path) -> tuple[dict[str, Any], list[dict[str, int]]]:
    """`distributedInfo` and the `ProfilerStep#n` spans (ns) of one Kineto trace file."""
    with gzip.open(path, "rt") if str(path).endswith(".gz") else open(path) as f:
        doc = json.load(f)
    steps = []
    for ev in doc.get("traceEvents", []):
        name = ev.get("name", "")
        if ev.get("ph") == "X" and name.startswith("ProfilerStep#"):
            steps.append(
                {
                    "profiler_step": int(name.split("#", 1)[1]),
                    "ts_ns": round(float(ev["ts"]) * 1000),
                    "dur_ns": round(float(ev["dur"]) * 1000),
                }
            )
    return doc.get("distributedInfo", {}), steps


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        # Loopback only: gloo otherwise resolves the host name to pick an interface.
        GLOO_SOCKET_IFNAME="lo",
        MASTER_ADDR="127.0.0.1",
    )
    return env


def run_config(
    cfg: RunConfig, control: RunControl, out: Path, layout: str = "merged", log=print
) -> dict[str, Any]:
    """Run one configuration into `out/<cfg.name>/` and return its measured.json content."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    job = out / cfg.name
    if job.exists():
        shutil.rmtree(job)  # a half-written earlier run must not mix with this one
    work = job / ".work"
    work.mkdir(parents=True)
    port = free_port()
    spec = {
        "config": dataclasses.asdict(cfg),
        "control": control.to_dict(),
        "port": port,
        # The trace names its job (the warehouse reads a top-level job_name before the folder).
        "job_name": cfg.name if layout == "merged" else cfg.name + ".cycle-{cycle}",
        "trace_pattern": str((job if layout == "cycles" else work) / CYCLE_TRACE),
        "result_pattern": str(work / "rank-{rank}.result.json"),
    }
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    started = time.time()
    procs = []
    for rank in range(cfg.world_size):
        errf = open(work / f"rank-{rank}.log", "w")
        cmd = [sys.executable, "-m", "lumos.groundtruth.worker", str(spec_path), str(rank)]
        procs.append(
            (
                rank,
                subprocess.Popen(
                    cmd, env=_env(control.threads), stdout=errf, stderr=subprocess.STDOUT
                ),
                errf,
            )
        )
    failed: list[str] = []
    deadline = started + control.timeout_s
    for rank, proc, errf in procs:
        try:
            code = proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = "timeout"
        errf.close()
        if code != 0:
            tail = (work / f"rank-{rank}.log").read_text()[-2000:]
            failed.append(f"rank {rank} exited {code}:\n{tail}")
    if failed:
        for _, proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        raise RunFailed(f"{cfg.name}: " + "\n".join(failed))
    results = [
        json.loads((work / f"rank-{r}.result.json").read_text()) for r in range(cfg.world_size)
    ]
    if layout == "merged":
        for r in range(cfg.world_size):
            cycles = [work / CYCLE_TRACE.format(cycle=k, rank=r) for k in range(control.repeat)]
            merge_cycles(cycles, job / MERGED_TRACE.format(rank=r))
    measured = _measured(cfg, control, job, layout, results, time.time() - started)
    (job / "measured.json").write_text(json.dumps(measured, indent=1))
    shutil.rmtree(work)
    log(
        f"{cfg.name}: traced median {measured['traced']['step']['median'] / 1e6:.2f} ms "
        f"(cv {measured['traced']['step']['cv']:.3f}), unprofiled median "
        f"{measured['unprofiled']['step']['median'] / 1e6:.2f} ms, {measured['elapsed_s']:.1f} s"
    )
    return measured


def _measured(
    cfg: RunConfig,
    control: RunControl,
    job: Path,
    layout: str,
    results: list[dict],
    elapsed: float,
) -> dict[str, Any]:
    pattern = MERGED_TRACE if layout == "merged" else CYCLE_TRACE
    spans: dict[tuple[str, int], int] = {}
    for res in results:
        for cycle in range(1 if layout == "merged" else control.repeat):
            path = job / pattern.format(cycle=cycle, rank=res["rank"])
            info, steps = profiler_steps(path)
            expect = control.repeat if layout == "merged" else 1
            if len(steps) != expect or info.get("rank") != res["rank"]:
                raise RunFailed(
                    f"{path}: expected {expect} ProfilerStep(s) and distributedInfo rank "
                    f"{res['rank']}, got {len(steps)} and {info!r}"
                )
            for st in steps:
                spans[(str(path.relative_to(job)), st["profiler_step"])] = st["dur_ns"]
    traced: list[dict[str, Any]] = []
    for cycle in range(control.repeat):
        ranks = []
        for res in results:
            rec = next(s for s in res["steps"] if s["cycle"] == cycle)
            trace = pattern.format(cycle=cycle, rank=res["rank"])
            ranks.append(
                {
                    "rank": res["rank"],
                    "wall_ns": rec["wall_ns"],
                    "profiler_step": rec["profiler_step"],
                    "profiler_step_span_ns": spans[(trace, rec["profiler_step"])],
                    "trace": trace,
                    "loss": rec["loss"],
                }
            )
        traced.append(
            {
                "cycle": cycle,
                "step_index": rec["index"],
                "profiler_step": rec["profiler_step"],
                # The job's step time is its slowest rank's: ranks wait for each other in collectives.
                "wall_ns": max(r["wall_ns"] for r in ranks),
                "profiler_step_span_ns": max(r["profiler_step_span_ns"] for r in ranks),
                "ranks": ranks,
            }
        )

    def by_phase(phase: str) -> dict[str, Any]:
        per_rank = {
            res["rank"]: [s for s in res["steps"] if s["phase"] == phase] for res in results
        }
        n = len(per_rank[0])
        steps = [max(per_rank[r][i]["wall_ns"] for r in per_rank) for i in range(n)]
        return {
            "wall_ns": steps,
            "per_rank_wall_ns": {str(r): [s["wall_ns"] for s in v] for r, v in per_rank.items()},
            "step": spread(steps),
            "per_rank": {str(r): spread([s["wall_ns"] for s in v]) for r, v in per_rank.items()},
        }

    traced_walls = [t["wall_ns"] for t in traced]
    spans = [t["profiler_step_span_ns"] for t in traced]
    return {
        "name": cfg.name,
        "config": cfg.to_dict(),
        "control": control.to_dict(),
        "torch": results[0]["torch"],
        "host_cores": host_cores(),
        "elapsed_s": round(elapsed, 3),
        "layout": {"name": layout, "trace": pattern},
        "traced": {
            "steps": traced,
            "step": spread(traced_walls),
            "profiler_step_span": spread(spans),
        },
        "unprofiled": by_phase("unprofiled"),
        # In-profiler steps that were not traced: the profiler is idle (wait) or collecting and
        # discarding (profiler_warmup). Kept to show the profiler's own cost.
        "wait": by_phase("wait"),
        "profiler_warmup": by_phase("profiler_warmup"),
    }


def run_grid(
    runs: list[RunConfig], control: RunControl, out: Path, layout: str = "merged", log=print
) -> list[dict[str, Any]]:
    """Run every configuration in turn (never two at once: they would share the two cores)."""
    out.mkdir(parents=True, exist_ok=True)
    return [run_config(cfg, control, out, layout, log) for cfg in runs]
