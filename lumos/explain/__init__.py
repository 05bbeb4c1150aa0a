"""Explanations of measured and replayed iterations.

Per job, rank, step and mode (`measured`, `model`, `identity`):
* `breakdown`: the step's GPU span split into exposed compute, overlapped compute and
  communication, exposed communication and other/idle (interval unions, `kernels.intervals`);
* `utilization`: the SM-utilisation timeline (share of each 1 ms bin with a busy stream);
* `critical_path`: the replayed step's critical path along the replay's `crit_src`, and the share
  of the step bounded by CPU, GPU compute, communication, launch overhead and sync waits.
`run.explain_job` computes them from a job's replay tables and writes them to the warehouse.
"""
