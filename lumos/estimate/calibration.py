"""Everything the warehouse's calibration jobs teach an estimator of one base job, learned in one place.

`Calibration.learn(wh, job, exclude)` runs each calibration model's calibration (collectives,
contention, working set, idle gaps, GEMM and attention curves) leaving out the jobs in `exclude`,
then lets the host prior of the base's device kind (`priors.py`) fill in every law the calibration jobs
could not teach. The estimator's cache (`estimator._build_cache`) and the accuracy check
(`accuracy.corpus_accuracy`, one model per held-out run) both come through here, so that what an
estimate knows and what the accuracy figures measure are the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lumos.estimate.comm import CommModel
from lumos.estimate.contention import Contention
from lumos.estimate.gemm_curve import GemmCurve
from lumos.estimate.idle_gaps import IdleGaps
from lumos.estimate.op_times import OpTimes, calibrate_shapes
from lumos.estimate.priors import HostPrior
from lumos.estimate.slope_law import state_lookup
from lumos.estimate.working_set import WorkingSet


@dataclass
class Calibration:
    comm: CommModel
    contention: Contention
    gemms: GemmCurve
    ops: OpTimes
    working_set: WorkingSet
    gaps: IdleGaps

    @classmethod
    def learn(
        cls,
        wh: Any,
        job: str,
        exclude: Sequence[str] = (),
        states: dict[str, tuple[float, float] | None] | None = None,
        prior: bool = True,
        tp_groups: dict[str, int] | None = None,
    ) -> Calibration:
        """What `wh`'s jobs (but those in `exclude`) teach about `job`'s device; with `prior`,
        the laws they cannot teach come from the packaged prior of its device kind. `states`
        and `tp_groups` memoise each job's inferred sizes and tensor-parallel group across
        calls (one per held-out run)."""
        from lumos.estimate.calibration_sql import catalog_connection

        con = catalog_connection(wh)  # one snapshot and one connection for every model
        try:
            return cls._learn(con or wh, job, exclude, states, prior, tp_groups)
        finally:
            if con is not None:
                con.close()

    @classmethod
    def _learn(
        cls,
        wh: Any,
        job: str,
        exclude: Sequence[str],
        states: dict[str, tuple[float, float] | None] | None,
        prior: bool,
        tp_groups: dict[str, int] | None,
    ) -> Calibration:
        from lumos.estimate import priors

        states = {} if states is None else states
        comm = CommModel.calibrate(wh, job, exclude=exclude, tp_groups=tp_groups)
        ws = WorkingSet.calibrate(wh, job, exclude=exclude, states=states)
        gaps = IdleGaps.calibrate(wh, job, exclude=exclude, states=states)
        p = priors.load(base_kind(wh, job)) if prior else None
        if p is not None:
            comm = comm.with_prior(p)
            ws = ws.with_prior(p)
            gaps = gaps.with_prior(p)
        # contention without the working set's part: an estimate applies the two apart
        contention = Contention.calibrate(
            wh,
            job,
            exclude=exclude,
            lockstep_jobs=comm.lockstep_jobs,
            state_scale=ws.contention_scale(state_lookup(wh, states)),
        )
        if p is not None:
            contention = contention.with_prior(p)
        # the shape curves divide each job's samples by its working-set slowdown: after the prior
        gemms, ops = calibrate_shapes(wh, job, exclude=exclude, job_scale=ws.job_scales())
        if p is not None:
            ops = ops.with_prior(p)
        return cls(comm, contention, gemms, ops, ws, gaps)


def base_kind(wh: Any, job: str) -> str:
    """'cpu' or 'gpu': the device kind of `job`'s traces ('cpu' when the warehouse cannot say)."""
    from lumos.estimate.calibration_sql import calibration_rows

    (rows,), why = calibration_rows(wh, ["base_kind"], job)
    return str(rows[0][0]) if not why and rows and rows[0][0] else "cpu"


def learn_prior(wh: Any, job: str, source: str, cores: int = 0) -> HostPrior:
    """The laws `wh`'s calibration jobs teach around base `job` (nothing borrowed from any prior), as a
    prior for warehouses that hold no such calibration jobs; `cores`: the CPU cores of the host it ran on.
    Raises ValueError naming every law the calibration jobs could not teach: a prior is only as complete
    as the calibration jobs it came from."""
    from lumos.estimate.slope_law import span_of

    f = Calibration.learn(wh, job, prior=False)
    c, ws, g = f.comm, f.working_set, f.gaps
    lock = f.contention.lockstep
    missing = [
        name
        for name, ok in (
            ("all-reduce latency and bandwidth", c.learned_fit),
            ("synchronous all-reduces", c.sync_alpha_ns is not None),
            ("exposed all-reduces", c.exposed_learned),
            ("multi-rank contention", bool(f.contention.by_world)),
            ("lock-step contention", lock is not None and bool(lock.by_world)),
            ("working-set slope", ws.learned),
            ("idle-gap slope", g.learned),
            ("attention times by shape", bool(f.ops.attn)),
        )
        if not ok
    ]
    if missing:
        raise ValueError(
            f"the calibration jobs around {job!r} cannot teach a prior: no {', '.join(missing)} learned"
        )
    assert lock is not None
    return HostPrior(
        base_kind(wh, job),
        source,
        c.alpha_ns,
        c.bw_bytes_per_ns,
        float(c.sync_alpha_ns or 0.0),
        c.exposed_wait_ns,
        dict(f.contention.by_world),
        dict(f.contention.ratios),
        dict(lock.by_world),
        dict(lock.ratios),
        ws.beta,
        span_of(ws.points),
        ws.spread,
        g.gamma,
        span_of(g.points),
        dict(f.ops.attn),
        int(cores),
    )
