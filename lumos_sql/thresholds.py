"""The graph rules' thresholds (`lumos_sql/graph/*.sql`), each named once with its reason.

They are rendered as DuckDB macros next to the taxonomy's (`taxonomy.macros_sql`), so a SQL file
writes `timer_noise_ns(gap_ns)`, not `2 * gap_ns + 2000`, and the reason is here beside it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["GRAPH_THRESHOLDS", "Threshold", "macros"]


class Threshold(NamedTuple):
    name: str  # the macro's name
    args: str  # its parameters, comma-separated ("" for a constant)
    expr: str  # its value, a SQL expression of the parameters
    reason: str


GRAPH_THRESHOLDS = (
    Threshold(
        "timer_noise_ns",
        "gap_ns",
        "2 * gap_ns + 2000",
        "a GPU start later than the graph explains by up to two inter-op gaps and 2 us is the "
        "trace's timer noise, not a wait (inferred stream waits, SM waits, unexplained slack)",
    ),
    Threshold(
        "timer_overlap_cap_ns",
        "gap_ns",
        "greatest(20000, 10 * gap_ns)",
        "the most a rank's own timer overlap (consecutive tasks of one stream) is trusted as noise "
        "when an inferred stream wait's source ends after its destination starts: V100 traces "
        "overlap by up to 13 us",
    ),
    Threshold(
        "ext_wait_min_ns",
        "gap_ns, ovl_ns",
        "greatest(timer_noise_ns(gap_ns), least(ovl_ns, timer_overlap_cap_ns(gap_ns)))",
        "a GPU start later than the graph explains is a measured external wait only beyond the "
        "timer noise and beyond the rank's own noise band (its largest same-stream overlap, capped "
        "as above): trace_diff/test's clocks disagree by up to 13 us, and its 5-13 us delays are "
        "the tail of its inter-op gaps, not waits",
    ),
    Threshold(
        "sm_wait_tail_ns",
        "wave_ns",
        "3 * wave_ns + 10000",
        "a kernel held back by a wide kernel of another stream starts in that kernel's last three "
        "waves, give or take 10 us of timing",
    ),
    Threshold(
        "thread_wake_gap_ns",
        "",
        "50000",
        "an idle gap of 50 us or more on a CPU thread starts a burst that another thread may have "
        "woken (autograd's thread after `backward()`, a worker after a post)",
    ),
    Threshold(
        "sm_max_warps",
        "",
        "64",
        "resident warps per SM at full occupancy: 2048 threads on every data-center NVIDIA GPU "
        "since Kepler, as the traces' deviceProperties say",
    ),
)


def macros() -> list[str]:
    """The `name(args) AS expr` bodies of the thresholds' macros."""
    return [f"{t.name}({t.args}) AS {t.expr}" for t in GRAPH_THRESHOLDS]
