"""Fresh compile caches for every test, without recompiling the same C++.

Inductor's TestCase gives each test a new, empty cache directory, so every
test compiles every C++ kernel again with g++: about half of a results cell's
time, for kernels an earlier test compiled from the same source. Here a
pytest process has one cache directory (conftest.py), and before each test,
and wherever a test asks for a fresh cache, `fresh_compile_caches()` empties
it of everything but the compiled kernels and the precompiled headers, and
clears Inductor's in-memory caches. So each test starts cold for what the
tests count and what the feature is about (the FX graph cache, the
AOTAutogradCache and any other cache torch keeps there, on disk and in
memory), and a kernel is loaded from the file its source hash names, as
Inductor does across processes.

Where the matrix names a kernel store (kept_kernels.py), the directory
starts as a copy of the kernels earlier runs of the same venv compiled, and
what this process compiled is added to the store at its end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import kept_kernels

# What is kept: the directories Inductor's code caches write a source file and
# its build into, named by two characters of the source's hash (`4x/c4xa6...
# .cpp`, `.so`, the wrapper's `.py`), the precompiled headers and the lock
# files. Anything else (the `fxgraph` and `aotautograd` caches, and whatever a
# later release adds) goes.
KEPT = {"locks", kept_kernels.PRECOMPILED_HEADERS}
CACHE_DIR_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
# Only a directory made here is ever emptied: a test run without conftest.py
# (python -m unittest, say) must not empty the user's own Inductor cache.
PREFIX = "pregrad-inductor-cache-"


def make_process_cache_dir() -> Path:
    """A new cache directory for this process's compiles, in the environment
    (children a test starts inherit it)."""
    path = Path(tempfile.mkdtemp(prefix=PREFIX))
    os.environ[CACHE_DIR_VARIABLE] = str(path)
    # Inductor's TestCase would put each test in a new directory instead.
    os.environ["INDUCTOR_TEST_DISABLE_FRESH_CACHE"] = "1"
    return path


def empty_but_kernels(root: Path) -> None:
    for entry in root.iterdir():
        if entry.name in KEPT or (entry.is_dir() and kept_kernels.is_kernel_directory(entry.name)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


@contextlib.contextmanager
def fresh_compile_caches() -> Iterator[Path]:
    """Inductor's `fresh_cache()`, keeping the compiled kernels (see above)."""
    from torch._inductor.utils import clear_caches

    root = Path(os.environ.get(CACHE_DIR_VARIABLE, ""))
    if not root.name.startswith(PREFIX):
        root = make_process_cache_dir()
    empty_but_kernels(root)
    keep_precompiled_headers_in(root)
    clear_caches()
    try:
        yield root
    finally:
        clear_caches()


def keep_precompiled_headers_in(root: Path) -> None:
    """Inductor puts its precompiled `cpp_prefix.h` in a directory of its own
    under the system's temporary directory, shared by every process of the
    user; here it goes into this process's directory, kept with the kernels."""
    from torch._inductor import codecache

    if hasattr(codecache, "_HEADER_DIR"):
        headers = root / kept_kernels.PRECOMPILED_HEADERS
        codecache._HEADER_DIR = str(headers)
        codecache._HEADER_LOCK_DIR = str(headers / "locks")


def seed_from_store(root: Path) -> None:
    """The kernels the store keeps for this venv, copied into `root`."""
    store = kept_kernels.store_root()
    if store is not None:
        kept_kernels.seed(root, kept_kernels.store_of(store, kept_kernels.key_inputs()))


def publish_to_store(root: Path) -> None:
    """What this process compiled, added to the store (if the matrix named one)."""
    store = kept_kernels.store_root()
    if store is not None and root.is_dir():
        kept_kernels.publish(root, kept_kernels.store_of(store, kept_kernels.key_inputs()))
