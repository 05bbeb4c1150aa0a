"""`lumos replay`: rebuild each job's execution graph, replay it, store and print the errors."""

from __future__ import annotations

import argparse
import sys

from lumos.commands.options import add_warehouse, job_name

DESCRIPTION = """\
Replay every ingested job (or each --job): rebuild its execution graph from the warehouse, replay
it (model and identity modes; multirank for jobs of several ranks), explain it, and write the
tables (iteration_replay, replay_quality, schedules, breakdown, critical_path, ...). A job whose
replay is current (same ingested files, same lumos code; table replay_runs) is skipped, so a
nightly run only replays what changed; --force replays it anyway. A job that fails is recorded
with its error and the others go on. Prints replayed vs measured per job, rank and metric.
Exits 1 when any job failed (or still fails), 2 on a bad argument."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay",
        help="replay every ingested job (or --job) and print replayed vs measured iterations",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--job", type=job_name, action="append", help="job to replay (repeatable; default: all)"
    )
    add_warehouse(p)
    p.add_argument(
        "--no-explain",
        action="store_true",
        help="skip the explanation tables (breakdown, SM utilisation, critical path)",
    )
    p.add_argument(
        "--force", action="store_true", help="replay jobs whose stored replay is current too"
    )
    p.add_argument(
        "--workers", type=int, default=1, metavar="N", help="replay N jobs in parallel (default 1)"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary and errors")
    p.set_defaults(func=_run)


class _Progress:
    """Jobs done so far and the last one, on one progress line."""

    def __init__(self) -> None:
        from lumos.commands.progress import ProgressLine

        self.line = ProgressLine()

    def __call__(self, outcome, done: int, total: int) -> None:  # noqa: ANN001
        self.line.draw(
            done / total if total else 1.0,
            f"{done}/{total} jobs {self.line.elapsed:.0f}s; {outcome.job}: {outcome.status} "
            f"({outcome.seconds:.1f} s)",
            final=done >= total,
        )


def _run(args: argparse.Namespace) -> int:
    from lumos.api import WarehouseNotFound
    from lumos.replay.fleet import replay_fleet, stored_quality
    from warehouse.catalog import build_catalog

    if args.workers < 1:
        print("lumos replay: --workers must be at least 1", file=sys.stderr)
        return 2
    bar = None if args.quiet else _Progress()
    try:
        report = replay_fleet(
            args.warehouse,
            args.job,
            force=args.force,
            explain=not args.no_explain,
            workers=args.workers,
            on_job=bar,
        )
    except (WarehouseNotFound, ValueError) as exc:
        print(f"lumos replay: {exc}", file=sys.stderr)
        return 2
    finally:
        if bar:
            bar.line.close()
    root = report.root
    # the result tables may be new folders: give them views in the catalog (an S3 warehouse's
    # connections make their views themselves)
    if (report.count("replayed") or report.count("failed")) and not isinstance(root, str):
        build_catalog(root)
    if not args.quiet:
        # replayed jobs, and the current ones the user named
        shown = [
            (o, o.quality if o.quality is not None else stored_quality(root, o.job))
            for o in report.outcomes
            if o.status == "replayed" or (o.status == "current" and args.job)
        ]
        _print_table(shown)
        for o, quality in shown:
            why = _nothing_scored(o, quality)
            if why:
                print(f"lumos replay: job {o.job!r}: {why}", file=sys.stderr)
            if o.n_unmatched:
                print(
                    f"lumos replay: job {o.job!r}: {o.n_unmatched} of {o.n_collectives} "
                    "collective kernels not matched across ranks (their order and steps "
                    "disagree); the multirank replay runs them with their traced durations, "
                    "not joined to their peers: see `select * from collectives where status = "
                    "'unmatched'`",
                    file=sys.stderr,
                )
    for o in report.failed:
        again = " (failed before on the same files and code)" if o.status == "still failing" else ""
        print(
            f"lumos replay: job {o.job!r} could not be replayed{again}: {o.error}", file=sys.stderr
        )
    print(report.summary())
    return 1 if report.failed else 0


def _print_table(shown: list) -> None:
    if not shown:
        return
    from lumos.replay.bounds import MAX_BOUND, MEDIAN_BOUND, cause_words, off_bounds

    print(
        f"{'job':<24} {'rank':>4} {'metric':<9} {'steps':>5} {'model med/max %':>16} "
        f"{'identity med/max %':>19} {'slack ms':>9} {'ext wait %':>10}"
    )
    off = []
    for o, quality in shown:
        by = {(r["rank"], r["metric"], r["mode"]): r for r in quality.to_pylist()}
        for rank, metric, mode in sorted(by):
            if mode != "model":
                continue
            m = by[(rank, metric, "model")]
            i = by.get((rank, metric, "identity"))
            ident = (
                f"{100 * i['median_rel_error']:.2f}/{100 * i['max_rel_error']:.2f}" if i else "-"
            )
            slack = (m["unexplained_slack_ns"] or 0) / 1e6
            bad = off_bounds(m)
            if bad:
                off.append((o.job, m))
            print(
                f"{o.job:<24} {rank:>4} {metric:<9} {m['n_steps']:>5} "
                f"{100 * m['median_rel_error']:>7.2f}/{100 * m['max_rel_error']:<8.2f} "
                f"{ident:>19} {slack:>9.2f} {100 * (m['ext_wait_share'] or 0):>10.2f}"
                + ("  OFF BOUND" if bad else "")
            )
    # per job whose external waits take more of a step than the median bound (dropping them
    # would move the model's figure by more than that) or whose model replay is off bounds
    for o, quality in shown:
        model = [r for r in quality.to_pylist() if r["mode"] == "model"]
        share = max((r["ext_wait_share"] or 0 for r in model), default=0.0)
        mine = [m for j, m in off if j == o.job]
        if share <= MEDIAN_BOUND and not mine:
            continue
        worst = max(model, key=lambda r: r["ext_wait_share"] or 0)
        waits = (
            f"external waits are up to {100 * share:.1f} % of a step (mostly "
            f"{worst['wait_cause']}: {cause_words(worst['wait_cause'])}), kept as measured in "
            "the model replay"
        )
        bound = (
            f"; its model replay is off by more than the bound (median {100 * MEDIAN_BOUND:.0f} %, "
            f"max {100 * MAX_BOUND:.0f} %) on {len(mine)} rank metric(s): do not trust its "
            "model figures"
            if mine
            else ""
        )
        print(f"lumos replay: job {o.job!r}: {waits}{bound}", file=sys.stderr)


def _nothing_scored(outcome, quality) -> str | None:  # noqa: ANN001
    """Why a replayed job has no row in the table above, or what its one row stands for (None
    when every rank has per-step rows)."""
    if outcome.n_iterations is None:
        return None
    if outcome.n_iterations == 0:
        return (
            "no CPU operation or runtime call in its trace, so there is no iteration to replay; "
            "profile with torch.profiler.schedule and call prof.step() every iteration"
        )
    if outcome.whole_capture:
        unscored = (
            ""
            if quality.num_rows
            else ", not scored: it launches GPU work the capture does not hold (truncated)"
        )
        return (
            "no ProfilerStep#N span in its trace: step 0 is the whole capture (its busiest CPU "
            f"thread, first to last operation){unscored}; profile with torch.profiler.schedule "
            "and call prof.step() every iteration for per-iteration figures"
        )
    if quality.num_rows:
        # a rank whose every step is warm-up or truncated has no row: say so, not drop it
        missing = sorted(set(outcome.ranks or ()) - set(quality.column("rank").to_pylist()))
        if not missing:
            return None
        return (
            f"rank(s) {', '.join(map(str, missing))} not scored: every traced step of theirs is "
            "warm-up or truncated (it launches GPU work the capture does not hold); their steps "
            "are in `iterations`"
        )
    return (
        f"all {outcome.n_iterations} traced step(s) are warm-up or truncated, so none is scored "
        "(the first traced step is warm-up; profile a few more steps)"
    )
