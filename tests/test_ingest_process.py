"""An ingest process keeps the memory it frees for the next chunk (warehouse.ingest_process):
glibc's defaults hand it back and the next chunk faults fresh pages in. Each case runs in a
fresh interpreter, since malloc's settings are per process."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tests.cli_run import ROOT

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt and its fault counts are glibc's",
)

# Frees 64 MiB of 1 MiB numpy arrays, allocates them again, prints the page faults of the second
# round (each array touched, so a page given back to the OS is faulted in again).
_ROUNDS = """
import resource, sys
import numpy as np
from warehouse.ingest_process import keep_freed_memory
if sys.argv[1] == "keep":
    print(keep_freed_memory())
def round_():
    arrays = [np.ones(1 << 17) for _ in range(64)]
    del arrays
round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
round_()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _rounds(mode: str, **env: str) -> list[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", _ROUNDS, mode],
        cwd=ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_freed_memory_is_reused_without_faults() -> None:
    (faults_default,) = _rounds("default")
    kept, faults_kept = _rounds("keep")
    assert kept == "True"
    # 64 MiB is 16,384 pages: glibc's defaults fault most of them in again
    assert int(faults_default) > 8_000
    assert int(faults_kept) < 500


def test_a_malloc_tuned_through_the_environment_is_left_alone() -> None:
    kept, faults = _rounds("keep", MALLOC_ARENA_MAX="2")
    assert kept == "False"
    assert int(faults) > 8_000
