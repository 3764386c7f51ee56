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


def seed(live: Path, store: Path) -> int:
    """Copy what the store holds into the live directory; how many files."""
    if not store.is_dir() or refused(store):
        return 0
    copied = 0
    for directory in kept_entries(store):
        for source in directory.rglob("*"):
            if source.is_file() and not source.is_symlink() and PUBLISHING not in source.name:
                target = live / source.relative_to(store)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
                copied += 1
    return copied


def publish(live: Path, store: Path) -> int:
    """Add to the store each kept file of the live directory that it lacks
    (lock files aside); other keys' stores beside it go. How many files."""
    if refused(store):
        return 0
    for directory in (store.parent, store):
        if not directory.exists():
            directory.mkdir(mode=0o700, parents=True)
            directory.chmod(0o700)  # whatever the umask
    for other in store.parent.iterdir():
        if other != store and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
    added = 0
    for directory in kept_entries(live):
        for source in directory.rglob("*"):
            if (not source.is_file() or source.is_symlink() or source.suffix == ".lock"
                    or "locks" in source.relative_to(live).parts):
                continue
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
