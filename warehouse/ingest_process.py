"""What a process that does nothing but ingest sets up first: the `lumos ingest` command and its
parse workers. The Python API and Dagster, which share their process with other work, are left
alone."""

from __future__ import annotations

import ctypes
import os

import pyarrow as pa

from warehouse.no_pandas import block_pandas
from warehouse.readers.columns import POOL

__all__ = ["keep_freed_memory", "prepare_ingest_process", "prepare_ingest_worker"]

# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
# glibc refuses an mmap threshold above half its 64 MiB heap size
_MMAP_THRESHOLD = 32 << 20
# free memory at the heap's top kept before trimming: a row group's columns and then some
_TRIM_THRESHOLD = 128 << 20
_TOP_PAD = 32 << 20


def keep_freed_memory() -> bool:
    """Have glibc's malloc keep freed memory for reuse instead of handing it back to the OS.

    Every chunk's column buffers (numpy arrays of 0.1-4 MiB) are freed once their row group is
    written. By default glibc maps each of them afresh (its mmap threshold) or trims the heap
    under them, and the next chunk's kernels fault in new zeroed pages: on the 54 MB trace
    ~9,000 faults per file, ~9 % of a warm ingest's CPU; on the 1 GB trace ~0.2 s of system CPU.
    Peak RSS is unchanged: the memory kept is what the peak already held.

    False (and nothing changed) off glibc, or when the user tunes malloc through the environment.
    """
    if any(k.startswith("MALLOC_") for k in os.environ) or "glibc.malloc" in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):  # no mallopt, or no CDLL(None) (Windows)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(
        mallopt(param, value) == 1
        for param, value in (
            (_M_MMAP_THRESHOLD, _MMAP_THRESHOLD),
            (_M_TRIM_THRESHOLD, _TRIM_THRESHOLD),
            (_M_TOP_PAD, _TOP_PAD),
        )
    )


def prepare_ingest_process() -> None:
    """Keep pandas out (`block_pandas`), make the allocator the columns use every Arrow
    allocation's default, and keep freed memory for reuse (`keep_freed_memory`).

    Arrow's default pool (mimalloc) hands freed memory back to the OS, so the buffers each chunk
    allocates outside the reader's own pool (Arrow compute results, batch and table assembly)
    faulted in fresh zeroed pages every time: on the 1 GB trace 0.12 s of the 0.5 s of system
    CPU, and 30 MB more peak RSS.
    """
    block_pandas()
    pa.set_memory_pool(POOL)
    keep_freed_memory()


def prepare_ingest_worker() -> None:
    """A parse worker's set-up: `prepare_ingest_process`, and end with the ingest that started
    it (`parent_death.die_with_parent`)."""
    from warehouse.parent_death import die_with_parent

    die_with_parent()
    prepare_ingest_process()
