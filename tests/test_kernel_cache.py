"""The reader's and the replay's cached kernels are recompiled when a helper in another module of
their package changes (numba alone keys a cached kernel by its own file: the old machine code
stayed in use)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import kernels.jit_cache as replay_cache
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


_REPLAY_HELPER = (
    "from numba import njit\n\n\n@njit(cache=True)\ndef helper():\n    return {value}\n"
)
_REPLAY_CALLER = (
    "{stamp}from numba import njit\n\nfrom replay_helper import helper\n\n\n"
    "@njit(cache=True)\ndef caller():\n    return helper() + 1\n\n\nprint(caller())\n"
)


def test_replay_kernels_are_keyed_by_every_replay_module(tmp_path: Path) -> None:
    """`kernels.jit_cache` stamps a replay kernel with all of `kernels/replay*.py` (the batch
    driver links in the event-driven and linear kernels of other modules). Without it, numba
    keeps the caller's old machine code after its helper's module changed: the control."""
    for stamped in (True, False):
        pkg = tmp_path / ("stamped" if stamped else "plain")
        pkg.mkdir()
        shutil.copy(replay_cache.__file__, pkg / "jit_cache.py")
        (pkg / "replay_helper.py").write_text(_REPLAY_HELPER.format(value=1))
        stamp = "import jit_cache  # noqa: F401\n" if stamped else ""
        (pkg / "replay_caller.py").write_text(_REPLAY_CALLER.format(stamp=stamp))
        cache_dir = tmp_path / f"cache_{pkg.name}"
        run = [sys.executable, "replay_caller.py"]
        env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_dir)}

        def out(run: list[str] = run, env: dict[str, str] = env, pkg: Path = pkg) -> str:
            got = subprocess.run(run, cwd=pkg, env=env, capture_output=True, text=True, check=True)
            return got.stdout.strip()

        assert out() == "2"
        assert out() == "2"  # from the cache
        assert any(cache_dir.rglob("replay_caller.caller-*.nbi")), "the kernel was not cached"
        (pkg / "replay_helper.py").write_text(_REPLAY_HELPER.format(value=41))
        assert out() == ("42" if stamped else "2")


_READ = (
    "import sys\n"
    "from warehouse.readers import open_trace\n"
    "n = sum(b.num_rows for b in open_trace(sys.argv[1]).batches())\n"
    "print(n, 'numba.np.arraymath' in sys.modules, 'scipy.linalg' in sys.modules)\n"
)


def test_a_cached_kernel_loads_without_numbas_lowering_registries(
    tmp_path: Path, examples: Path
) -> None:
    """Loading the reader's cached kernels skips numba's context refresh (every lowering
    registry, numpy's `arraymath` and its BLAS probe: 0.16 s of each ingest process); a cache
    miss still compiles, and both read the same events."""
    trace = sorted((examples / "dlrm_8rank").glob("*.json.gz"))[0]
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def read() -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", _READ, str(trace)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.split()

    compiled = read()  # an empty cache: compiled (which refreshes numba's context)
    assert any((tmp_path / "cache").rglob("*.nbi")), "the kernels were not cached"
    loaded = read()
    assert loaded[0] == compiled[0] and int(loaded[0]) > 0
    assert loaded[1:] == ["False", "False"], "a cache load refreshed numba's target context"
