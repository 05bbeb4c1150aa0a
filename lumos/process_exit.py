"""End a command-line process without the interpreter's teardown.

A `lumos` process imports numba, pyarrow and DuckDB: ~10^6 objects that the interpreter's
finalisation walks and frees one by one (a last garbage collection, then every module's dict)
before the operating system reclaims the same memory at once, a tenth of a small ingest's CPU
(docs/warehouse.md, "Module notes"). `exit_now` ends the process as the
interpreter would, less that walk: non-daemon threads are joined, `atexit` handlers run (thread
and process pools, `weakref.finalize`), the standard streams are flushed, then `os._exit`.
Only for the console script's last step: nothing may still hold unwritten data in a Python object.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Exit with `code` after what `sys.exit` would have run of ours, skipping the teardown."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that left (`lumos sql ... | head`) or closed
            pass
    os._exit(code)
