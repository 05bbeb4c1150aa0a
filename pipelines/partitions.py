"""Partitions, defined once: one dynamic partition per training job.

A job's ranks are not partitions of their own: ingesting them is one step with a process pool
inside it, because a Dagster run costs seconds of fixed overhead and the ranks of
a job are small and always wanted together. The sensor registers new jobs; the main job and the
tests register them directly on the instance.
"""

from __future__ import annotations

import dagster as dg

TRACE_JOBS = "trace_jobs"

trace_jobs = dg.DynamicPartitionsDefinition(name=TRACE_JOBS)
