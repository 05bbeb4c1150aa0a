"""The two reports assembled from their data: which figures and tables, in which sections, with
what words (`lumos report --job` and `lumos report --fleet`)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from lumos.report import charts
from lumos.report.gather import FleetData, JobData
from lumos.report.page import Link, Report, Section, Table, generated_line


def _gib(n: int | None) -> str:
    return "-" if not n else f"{n / 2**30:.2f} GiB"


def job_report(
    data: JobData,
    warehouse: Path,
    perfetto: dict[tuple[int, int], Path] | None = None,
    relative_to: str | os.PathLike[str] | None = None,
) -> Report:
    """The job report; `perfetto` maps (rank, step) to its export, linked relative to the
    report's folder `relative_to`."""
    sections: list[Section] = []
    if not data.steps.empty:
        sections.append(
            Section(
                "Steps",
                "Each step's measured time beside its replay (model; multirank: every rank "
                "replayed together, collectives waiting for their peers), per rank and metric: "
                "cpu_step the ProfilerStep span, gpu_span the GPU work launched in the step, "
                "period step start to next step start.",
                [charts.steps_chart(data.steps)],
            )
        )
    if not data.breakdown.empty:
        sections.append(
            Section(
                "Breakdown",
                "Each step's GPU span cut into exposed compute, compute overlapped with "
                "communication, exposed communication and idle; the trace's own times (opaque) "
                "next to the replays' (lighter). The tooltip names the time the step's "
                "collectives waited for other ranks (external waits).",
                [charts.breakdown_chart(data.breakdown, data.waits)],
            )
        )
    crit_figs = []
    if not data.critical.empty:
        crit_figs.append(charts.critical_chart(data.critical))
    if not data.top_kernels.empty:
        crit_figs.append(
            charts.top_tasks_chart(
                data.top_kernels, "top_kernels", "Kernels with the most exposed time"
            )
        )
    if not data.top_cpu.empty:
        crit_figs.append(
            charts.top_tasks_chart(data.top_cpu, "top_cpu", "CPU tasks with the most exposed time")
        )
    if crit_figs:
        sections.append(
            Section(
                "Critical path",
                "What bounded the replayed steps: the critical path's time per category "
                "(complete steps), and the tasks with the most time on it: time nothing else "
                "hid.",
                crit_figs,
            )
        )
    if data.config:
        sections.append(_config_section(data))
    sweeps = data.sweeps
    if not sweeps.empty:
        figs = [
            charts.sweep_chart(sweeps[sweeps["sweep_id"] == sid].reset_index(drop=True), i)
            for i, sid in enumerate(dict.fromkeys(sweeps["sweep_id"]))
        ]
        sections.append(
            Section(
                "Sweeps",
                "Every configuration of the job's newest sweeps: predicted tokens/s against "
                "memory per rank. The Pareto front (no configuration that fits is faster with "
                "less memory) in orange, what does not fit the device in grey, the job's own "
                "configuration (base) marked; hover a point for its configuration.",
                figs,
            )
        )
    if perfetto:
        base = Path(relative_to) if relative_to else None
        rows = [
            [r, s, Link(p.name, quote(os.path.relpath(p, base) if base else str(p)))]
            for (r, s), p in sorted(perfetto.items())
        ]
        sections.append(
            Section(
                "Perfetto",
                "The model replay of each step as a Chrome trace: open the file in "
                "https://ui.perfetto.dev (Open trace file).",
                tables=[Table(["rank", "step", "export"], rows)],
            )
        )
    return Report(
        f"lumos report: job {data.job}",
        generated_line(f"job {data.job}", warehouse),
        sections,
        data.notes,
    )


def _config_section(data: JobData) -> Section:
    cfg = data.config or {}
    rows = [
        [k, ev["value"], ev["confidence"], ev["source"], ev["evidence"]]
        for k, ev in cfg.get("fields", {}).items()
    ]
    tables = [Table(["field", "value", "confidence", "source", "evidence"], rows, "Configuration")]
    figs = []
    mem = data.memory
    if mem:
        fits = {None: "device memory unknown", True: "fits", False: "does NOT fit"}[mem["fits"]]
        tables.append(
            Table(
                ["stage", "layers", "params", "grads", "optimizer", "activations", "total"],
                [
                    [
                        st["stage"],
                        st["layers"],
                        _gib(st["param_bytes"]),
                        _gib(st["grad_bytes"]),
                        _gib(st["optimizer_bytes"]),
                        _gib(st["activation_bytes"]),
                        _gib(st["total_bytes"]),
                    ]
                    for st in mem["stages"]
                ],  # fmt: skip
                f"Memory per rank: {_gib(mem['memory_bytes'])} on the busiest; device "
                f"{_gib(mem['device_memory'])}: {fits}",
            )
        )
        figs.append(charts.memory_chart(mem))
    warnings = cfg.get("warnings") or []
    text = "The model and parallel configuration inferred from the trace, each field with its "
    text += "evidence (as `lumos describe`), and the memory per rank it implies."
    if warnings:
        text += " Warnings: " + " | ".join(warnings)
    return Section("Configuration", text, figs, tables)


def fleet_report(data: FleetData, warehouse: Path) -> Report:
    """The fleet report."""
    sections: list[Section] = []
    if not data.errors.empty:
        worst = charts.job_errors(data.errors)
        n_jobs = worst["job"].nunique()
        sections.append(
            Section(
                "Replay error",
                f"{n_jobs} replayed jobs: per job and metric the median relative error of the "
                "model replay over complete steps, of its worst rank; worst jobs first.",
                [charts.error_hist_chart(data.errors), charts.worst_jobs_chart(data.errors)],
                [
                    Table(
                        ["job", "metric", "median error %", "max error %", "ranks", "steps"],
                        [
                            [
                                r.job,
                                r.metric,
                                r.median_error_pct,
                                r.max_error_pct,
                                r.n_ranks,
                                r.n_steps,
                            ]
                            for r in worst.head(25).itertuples()
                        ],  # fmt: skip
                        "The 25 worst jobs",
                    )
                ],
            )
        )
    if not data.estimates.empty:
        n = len(data.estimates)
        inside = int(data.estimates["in_interval"].fillna(False).sum())
        sections.append(
            Section(
                "Estimates vs measured",
                f"{n} estimates of configurations a real job ran (estimate_vs_measured), their "
                f"error against the job's measured median step when they were made; {inside} of "
                "them hold the measurement in their interval.",
                [charts.estimates_chart(data.estimates)],
            )
        )
    if not data.ingest.empty:
        refused = data.ingest[data.ingest["status"] == "refused"]
        runs = [[r.status, r.n_jobs, r.example_error or ""] for r in data.runs.itertuples()]
        sections.append(
            Section(
                "Ingest health",
                f"{int(data.ingest['n_files'].sum())} trace files, "
                f"{int(refused['n_files'].sum()) if not refused.empty else 0} refused.",
                [charts.ingest_chart(data.ingest)],
                [
                    Table(
                        ["reason", "files", "jobs"],
                        [[r.reason, r.n_files, r.n_jobs] for r in refused.itertuples()],
                        "Refused files by reason",
                    ),
                    Table(["replay", "jobs", "example error"], runs, "Latest replay per job"),
                ],
            )
        )
    return Report(
        "lumos report: the fleet", generated_line("fleet", warehouse), sections, data.notes
    )
