"""Carrying out a parsed request: in this process (a checkout, an overlay
from the package index, --wheel where PyPA's wheel and packaging are here),
or handed as JSON to the target interpreter PY through _launch.py (an
installed wheel, an overlay from PY's install), which runs `carry_out` there.
Nothing here parses arguments: cli.py made the order."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from torch_backport.infra.errors import Failed
from torch_backport.infra.fsio import atomic_write, locked, make_dirs, trusted_cache
from torch_backport.infra.order import Order, Task
from torch_backport.infra.exit_codes import Exit

LAUNCH = Path(__file__).resolve().parent / "_launch.py"


# PyPA's wheel and packaging, and urllib3 (transport.py), for --wheel and
# --overlay from the index where python3 lacks them.
PYPA = ("wheel==0.48.0", "packaging==26.4", "urllib3==2.8.0")


def has_pypa() -> bool:
    import importlib.util
    from torch_backport.download import transport
    return importlib.util.find_spec("wheel") is not None and transport.available()


def pypa_venv(cache: Path) -> Path:
    """PyPA's venv for this Python: `--wheel` builds for the Python that runs
    the command, and `--lock` resolves with its pip, so the venv is made by
    this interpreter (a python3 of 3.10 gets a cp310 wheel, not one for the
    Python of a venv another run made)."""
    return cache / "tools" / f"pypa-py{sys.version_info.major}.{sys.version_info.minor}"


def pypa_python(cache: Path) -> str:
    """A venv in the cache with PyPA's wheel and packaging, made once per
    Python (one run at a time: two test jobs may ask at once). Only a cache
    no other user can write to is used (trusted_cache), checked again under
    the lock just before its python runs."""
    venv = pypa_venv(cache)
    tools = venv.parent
    python = venv / "bin" / "python"
    ready = venv / ".pregrad-ready"
    make_dirs(tools, trusted_cache(cache), 0o700)
    with locked(tools):
        trusted_cache(cache)
        if ready.is_file() and ready.read_text() == " ".join(PYPA) and python.exists():
            return str(python)
        print(f"installing PyPA's {' and '.join(PYPA)} into {venv} (once) ...",
              file=sys.stderr, flush=True)
        # The interpreter's own file: a venv links to the directory of the
        # name it was made by, and a python3 that is a link in a directory
        # that goes away (a temporary one) would leave it without a python.
        interpreter = os.path.realpath(sys.executable)
        for command in ([interpreter, "-m", "venv", "--clear", str(venv)],
                        [str(python), "-m", "pip", "install", "--quiet",
                         "--disable-pip-version-check", *PYPA]):
            if subprocess.run(command).returncode != 0:
                raise Failed(f"could not set up {venv} ({' '.join(command[:3])} failed; "
                             "its output is above); nothing was written")
        atomic_write(ready, " ".join(PYPA).encode(), 0o644)
    return str(python)


def in_target(python: str, order: Order) -> int:
    """Hand `order` to the engine under `python`; returns only on failure."""
    sys.stdout.flush()
    sys.stderr.flush()
    # A bare name (`--python python3`) is looked up on PATH, as require_python's run did.
    path = python if os.sep in python else (shutil.which(python) or python)
    argv = [path, str(LAUNCH), "engine", order.to_json()]
    # A Ctrl-C caught here a moment before exec would be lost with this
    # image (the engine would then run to the end); blocked, it stays
    # pending across exec, and _launch.py unblocks it once its own handler
    # is in place.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        os.execv(path, argv)
    finally:  # reached only if exec failed
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def carry_out(order: Order) -> int:
    """Carry out `order` in this interpreter (the target one for an install)."""
    from torch_backport.patchset import driver
    names = list(order.topics) or None  # READ_INSTALL_FILES names none
    if order.task is Task.BUILD_WHEEL:
        # PyPA's wheel is imported only for a build: an install's PY may lack it.
        from torch_backport.generated.fleet import cmd_fleet, targets
        from torch_backport.generated.patched_wheel import BuildRequest, cmd_wheel
        source, (out, cache) = order.source, order.written()
        assert source is not None
        if order.platforms or order.all_platforms:
            fleet = targets(list(order.platforms), list(order.pythons), order.all_platforms)
            return driver.generate(names, lambda chosen, optional: cmd_fleet(
                source.split("==", 1)[1], fleet, order.all_platforms, cache,
                BuildRequest(out, chosen, optional, order.check)),
                "each wheel is written whole or not at all; the index is written last",
                order.invoked_as)
        return driver.generate(names, lambda chosen, optional: cmd_wheel(
            source, cache, BuildRequest(out, chosen, optional, order.check, order.lock)),
            "the partial wheel was removed; nothing was written", order.invoked_as)
    if order.task is Task.OVERLAY:
        from torch_backport.generated.overlay import cmd_overlay
        base, (out, cache) = order.base, order.written()
        assert base is not None
        # An overlay leaves no topic out: it is what was asked for, or nothing.
        return driver.generate(
            names, lambda chosen, optional: cmd_overlay(base, out, order.from_install, cache,
                                                        chosen),
            "the output directory keeps a journal of what this run wrote; the next run "
            "finishes or replaces it", order.invoked_as)
    if order.task is Task.READ_INSTALL_FILES:
        from torch_backport.installed.pristine import probe
        print(json.dumps(probe(list(order.paths))))
        return Exit.OK
    if order.task is Task.VERIFY:
        from torch_backport.verify.command import run
        return run(order)
    if order.task is Task.CHECKOUT:
        from torch_backport.checkout.mode import open_checkout
        assert order.checkout is not None
        return driver.run(order.command, names, order.check, open_checkout(
            Path(order.checkout).resolve(), order.command, order.commit), order.invoked_as)
    from torch_backport.installed.mode import open_install, without_torch
    leftover = without_torch(order.command, order.check, order.json)
    if leftover is not None:
        return leftover
    return driver.run(order.command, names, order.check, open_install, order.invoked_as,
                      order.expect, as_json=order.json)
