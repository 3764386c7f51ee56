"""Inductor's compiled C++ kernels and precompiled headers, kept between
runs in a store, under a key of everything that decides their bytes.

A pytest process of the matrix (PREGRAD_KERNEL_STORE=<cache>/kernels/<venv>)
starts its own live cache directory (compile_caches.py) as a copy of
`<store>/<key>/`, and at its end adds what it compiled there. Two processes
never share a live directory: each copies in, and each publishes file by
file (a temporary name, then a rename), so a reader never sees half a file.

Nothing here holds what the tests count (the FX graph cache, the
AOTAutogradCache: compile_caches.py empties them for every test); a kernel
is a file named by the hash of its source and its command line, which
Inductor loads where it finds it, as it does across processes.
The vector-ISA probe's test libraries are kept the same way, in a store of
their own within the key's (PROBE_LIBRARIES, test_cpu_isa_probe.py), and its
`.load_ok` marks, which decide whether a probe starts a child, never are.

The key: the interpreter, the compiler and what it prints of its version,
the CPU's flags (`-march=native` is a literal on the command line) and the
torch files (the installed RECORD, which hashes every file the wheel wrote,
and the content of torch/_inductor and torch/_functorch, which a series
changes). Another key finds an empty store and compiles afresh; the store
keeps the current key only.

A kernel is a shared library Inductor loads and runs, so a store is used
only where each of its directories is this user's and no one else may write
to it (made 0700 here); another one is ignored with a warning, as pip
ignores a cache directory it does not own, and everything compiles afresh.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable

STORE_VARIABLE = "PREGRAD_KERNEL_STORE"
PRECOMPILED_HEADERS = "precompiled_headers"
# What is kept of a live cache directory: Inductor's code-cache directories
# (two characters of a source hash: `4x/c4xa6....cpp`, `.so`, the wrapper's
# `.py`) and the precompiled headers.
KERNEL_DIRECTORY = re.compile(r"[a-z0-9]{2}")
PUBLISHING = ".publishing-"
LOAD_OK = ".load_ok"
# The vector-ISA probe's test libraries (test_cpu_isa_probe.py), in a store
# of their own inside a key's store: the probe's tests compile them into
# cache directories of their own, never into a live one.
PROBE_LIBRARIES = "isa_probe_libraries"


def is_kernel_directory(name: str) -> bool:
    return KERNEL_DIRECTORY.fullmatch(name) is not None


@dataclasses.dataclass(frozen=True)
class KeyInputs:
    """What decides a compiled kernel's bytes, besides its source and command
    line (which name its file)."""
    interpreter: str
    compiler: str
    cpu_flags: str
    torch_files: str

    def key(self) -> str:
        digest = hashlib.sha256()
        for field in dataclasses.fields(self):
            digest.update(f"{field.name}={getattr(self, field.name)}\0".encode())
        return digest.hexdigest()[:32]


def compiler_identity() -> str:
    """Inductor's compiler (CXX, else g++: torch._inductor.config.cpp.cxx),
    where it is and what it says of its version."""
    name = os.environ.get("CXX") or "g++"
    found = shutil.which(name)
    if found is None:
        return f"{name}: not found"
    version = subprocess.run([found, "--version"], capture_output=True, text=True)
    return f"{os.path.realpath(found)}\n{version.stdout}"


def cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("flags", "Features")):
                    return " ".join(sorted(line.split(":", 1)[1].split()))
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def files_digest(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(f"{path}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def torch_files(torch_dir: Path) -> str:
    """The RECORD of the installed torch and the content of the two packages
    a series patches (about 25 MB, read in well under a second)."""
    records = sorted(torch_dir.parent.glob("torch-*.dist-info/RECORD"))
    changed = [path for package in ("_inductor", "_functorch")
               for path in (torch_dir / package).rglob("*")
               if path.is_file() and "__pycache__" not in path.parts]
    return files_digest([*records, *changed])


@functools.cache
def key_inputs() -> KeyInputs:
    import torch

    return KeyInputs(interpreter=f"{sys.executable}\n{sys.version}",
                     compiler=compiler_identity(), cpu_flags=cpu_flags(),
                     torch_files=torch_files(Path(torch.__file__).parent))


def store_of(root: Path, inputs: KeyInputs) -> Path:
    return root / inputs.key()


def kept_entries(directory: Path) -> Iterable[Path]:
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink() and (
                is_kernel_directory(entry.name) or entry.name == PRECOMPILED_HEADERS):
            yield entry


def is_trusted_directory(path: Path) -> bool:
    """A directory, not a link, that this user owns and no one else may write to."""
    try:
        found = path.lstat()
    except OSError:
        return False
    return (stat.S_ISDIR(found.st_mode) and found.st_uid == os.geteuid()
            and not found.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def untrusted_directory(store: Path) -> Path | None:
    """The first directory of the store (its venv's folder and down) that is
    not a trusted one; None if every one is."""
    for directory in (store.parent, store):
        if directory.exists() and not is_trusted_directory(directory):
            return directory
    for walked, _, _ in os.walk(store) if store.is_dir() else ():
        if not is_trusted_directory(Path(walked)):
            return Path(walked)
    return None


def refused(store: Path) -> bool:
    """Whether the store may not be used; says why on stderr."""
    found = untrusted_directory(store)
    if found is not None:
        print(f"kept kernels: {found} is not a directory of this user's that only it may "
              "write to; ignored, every kernel compiles afresh", file=sys.stderr)
    return found is not None


def is_kept_file(path: Path, directory: Path) -> bool:
    """Whether `path`, under `directory` (a live cache directory or a store),
    is kept: a regular file that is not a lock, nor the vector-ISA probe's
    mark that a test library loaded (`<library>.load_ok`, torch 2.14+), which
    is the probe's state, not a kernel: without it a probe starts its
    children as on a new machine."""
    return (path.is_file() and not path.is_symlink() and path.suffix != ".lock"
            and not path.name.endswith(LOAD_OK) and PUBLISHING not in path.name
            and "locks" not in path.relative_to(directory).parts)


def kept_files(directory: Path) -> Iterable[Path]:
    for entry in kept_entries(directory):
        for path in entry.rglob("*"):
            if is_kept_file(path, directory):
                yield path


def copy_missing(source: Path, target: Path) -> int:
    """Copy each kept file of `source` that `target` lacks, between two
    directories of this process's own (no store); how many files."""
    copied = 0
    for path in kept_files(source) if source.is_dir() else ():
        destination = target / path.relative_to(source)
        if not destination.exists():
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination)
            copied += 1
    return copied


def seed(live: Path, store: Path) -> int:
    """Copy what the store holds into the live directory; how many files."""
    if not store.is_dir() or refused(store):
        return 0
    return copy_missing(store, live)


def publish(live: Path, store: Path) -> int:
    """Add to the store each kept file of the live directory that it lacks;
    other keys' stores beside it go. How many files."""
    if refused(store):
        return 0
    make_private(store)
    for other in store.parent.iterdir():
        if other != store and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
    return copy_published(live, store)


def make_private(directory: Path) -> None:
    """`directory` and its parents up to an existing one, made 0700 whatever
    the umask."""
    missing = [directory, *directory.parents]
    missing = missing[:next(i for i, path in enumerate(missing) if path.exists())]
    for path in reversed(missing):
        path.mkdir(mode=0o700)
        path.chmod(0o700)


def add(live: Path, store: Path) -> int:
    """Add to `store` each kept file of `live` that it lacks (no other key's
    store goes: PROBE_LIBRARIES is inside one); how many files."""
    if refused(store):
        return 0
    make_private(store)
    return copy_published(live, store)


def copy_published(live: Path, store: Path) -> int:
    """Each kept file of `live` that the trusted `store` lacks, written under
    a temporary name first, so a reader never sees half a file; how many."""
    added = 0
    for source in kept_files(live):
        target = store / source.relative_to(live)
        if target.exists():
            continue
        target.parent.mkdir(mode=0o700, exist_ok=True)
        handle, partial = tempfile.mkstemp(prefix=PUBLISHING, dir=target.parent)
        os.close(handle)
        try:
            shutil.copy2(source, partial)
            os.replace(partial, target)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        added += 1
    return added


def store_root() -> Path | None:
    value = os.environ.get(STORE_VARIABLE)
    return Path(value) if value else None


def probe_library_store() -> Path | None:
    """Where the vector-ISA probe's test libraries are kept for this venv's
    key, if the matrix named a store."""
    root = store_root()
    return None if root is None else store_of(root, key_inputs()) / PROBE_LIBRARIES
