"""Worker processes that end with their parent: a killed `lumos ingest` or `lumos replay`
(kill -9, an out-of-memory kill) must not leave its pool workers running, holding memory and
the warehouse's staging files."""

from __future__ import annotations

import ctypes
import os
import signal

__all__ = ["die_with_parent"]

# prctl(2) option: the signal the kernel sends this process when its parent dies (Linux)
_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have the kernel send `sig` to this process when its parent dies; if the parent already
    died before the call (the process was re-parented: its parent is no longer the process
    that started it), exit now. False where the platform has
    no such call (it is Linux's), and nothing changed."""
    import multiprocessing

    # the pid that started this process: a worker's initializer may run after its parent died
    started_by = multiprocessing.parent_process()
    parent = started_by.pid if started_by is not None and started_by.pid else os.getppid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, TypeError):
        return False
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    if prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # died between the start and the call
        os._exit(1)
    return True
