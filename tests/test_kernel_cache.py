"""The reader's cached kernels are recompiled when a helper in another module of the package
changes (numba alone keys a cached kernel by its own file: the old machine code stayed in use)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import warehouse.readers.jit as jit

_HELPER = "from jit import kernel\n\n\n@kernel\ndef helper():\n    return {value}\n"
_CALLER = (
    "from jit import kernel\nfrom helper import helper\n\n\n"
    "@kernel\ndef caller():\n    return helper() + 1\n\n\nprint(caller())\n"
)


def _run(pkg: Path, cache_dir: Path | None, user_cache: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    if cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(cache_dir)
    if user_cache is not None:
        env["XDG_CACHE_HOME"] = str(user_cache)
    out = subprocess.run(
        [sys.executable, "caller.py"], cwd=pkg, env=env, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def test_edited_helper_recompiles_its_callers(tmp_path: Path) -> None:
    for cache_dir in (None, tmp_path / "numba_cache"):
        pkg = tmp_path / ("in_tree" if cache_dir is None else "cache_dir")
        pkg.mkdir()
        shutil.copy(jit.__file__, pkg / "jit.py")
        (pkg / "helper.py").write_text(_HELPER.format(value=1))
        (pkg / "caller.py").write_text(_CALLER)
        assert _run(pkg, cache_dir) == "2"
        assert _run(pkg, cache_dir) == "2"  # from the cache
        where = cache_dir if cache_dir is not None else pkg / "__pycache__"
        assert any(where.rglob("caller.caller-*.nbi")), "the kernel was not cached"
        (pkg / "helper.py").write_text(_HELPER.format(value=41))
        assert _run(pkg, cache_dir) == "42"


def test_user_cache_folder_is_keyed_by_the_package_too(tmp_path: Path) -> None:
    """Where the package's __pycache__ cannot be written (an installed package), numba falls back
    to the user's cache folder: the same package-wide key applies there."""
    pkg = tmp_path / "installed"
    pkg.mkdir()
    shutil.copy(jit.__file__, pkg / "jit.py")
    (pkg / "helper.py").write_text(_HELPER.format(value=1))
    (pkg / "caller.py").write_text(_CALLER)
    (pkg / "__pycache__").write_text("")  # a file: the in-tree cache folder cannot be made
    user = tmp_path / "xdg"
    assert _run(pkg, None, user) == "2"
    assert _run(pkg, None, user) == "2"
    assert any(user.rglob("caller.caller-*.nbi")), "the kernel was not cached in the user folder"
    (pkg / "helper.py").write_text(_HELPER.format(value=41))
    assert _run(pkg, None, user) == "42"
