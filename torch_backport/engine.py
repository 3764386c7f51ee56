"""Carrying out a parsed request: in this process (a checkout, an overlay
from the package index, --wheel where PyPA's wheel and packaging are here),
or handed as JSON to the target interpreter PY through _launch.py (an
installed wheel, an overlay from PY's install), which runs `engine` there.
Nothing here parses arguments: cli.py made the order."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

from torch_backport.errors import Failed
from torch_backport.fsio import atomic_write, locked

LAUNCH = Path(__file__).resolve().parent / "_launch.py"


# PyPA's wheel and packaging, and urllib3 (transport.py), for --wheel and
# --overlay from the index where python3 lacks them.
PYPA = ("wheel==0.48.0", "packaging==26.4", "urllib3==2.8.0")


def has_pypa() -> bool:
    import importlib.util
    from torch_backport import transport
    return importlib.util.find_spec("wheel") is not None and transport.available()


def pypa_python(cache: Path) -> str:
    """A venv in the cache with PyPA's wheel and packaging, made once (one
    run at a time: two test jobs may ask at once)."""
    tools = cache / "tools"
    venv = tools / "pypa"
    python = venv / "bin" / "python"
    ready = venv / ".pregrad-ready"
    tools.mkdir(parents=True, exist_ok=True)
    with locked(tools):
        if ready.is_file() and ready.read_text() == " ".join(PYPA):
            return str(python)
        print(f"installing PyPA's {' and '.join(PYPA)} into {venv} (once) ...",
              file=sys.stderr, flush=True)
        for command in ([sys.executable, "-m", "venv", "--clear", str(venv)],
                        [str(python), "-m", "pip", "install", "--quiet",
                         "--disable-pip-version-check", *PYPA]):
            if subprocess.run(command).returncode != 0:
                raise Failed(f"could not set up {venv} ({' '.join(command[:3])} failed; "
                             "its output is above); nothing was written")
        atomic_write(ready, " ".join(PYPA).encode(), 0o644)
    return str(python)


def in_target(python: str, order: Dict[str, Any]) -> int:
    """Hand `order` to the engine under `python`; returns only on failure."""
    sys.stdout.flush()
    sys.stderr.flush()
    # A bare name (`--python python3`) is looked up on PATH, as require_python's run did.
    path = python if os.sep in python else (shutil.which(python) or python)
    os.execv(path, [path, str(LAUNCH), "engine", json.dumps(order)])


def engine(order: Dict[str, Any]) -> int:
    """Carry out an order (in this interpreter: the target one for a wheel)."""
    from torch_backport import driver
    names = order.get("topics") or None  # an install-files order names none
    if order["engine"] == "wheel-build" and (order.get("platforms") or order.get("all_platforms")):
        from torch_backport.fleet import cmd_fleet, targets
        release = order["source"].split("==", 1)[1]
        return driver.generate(names, lambda chosen, optional: cmd_fleet(
            release, targets(order["platforms"], order["pythons"], order["all_platforms"]),
            order["all_platforms"], Path(order["out"]), Path(order["cache"]), chosen, optional,
            order["check"]), "each wheel is written whole or not at all; the index is "
            "written last")
    if order["engine"] == "wheel-build":
        from torch_backport.patched_wheel import cmd_wheel
        return driver.generate(names, lambda chosen, optional: cmd_wheel(
            order["source"], Path(order["out"]), Path(order["cache"]), chosen, optional,
            order["check"], order.get("lock")),
            "the partial wheel was removed; nothing was written")
    if order["engine"] == "overlay":
        from torch_backport.overlay import cmd_overlay
        # An overlay leaves no topic out: it is what was asked for, or nothing.
        return driver.generate(names, lambda chosen, optional: cmd_overlay(
            order["base"], Path(order["out"]), order["from_install"], Path(order["cache"]),
            chosen), "the output directory keeps a journal of what this run wrote; the "
            "next run finishes or replaces it")
    if order["engine"] == "install-files":
        # Another interpreter reads this one's torch (pristine.install_files).
        from torch_backport.pristine import probe
        print(json.dumps(probe(order["paths"])))
        return 0
    if order["engine"] == "verify":
        from torch_backport.verify import run
        return run(order)
    if order["engine"] == "checkout":
        from torch_backport.checkout_mode import open_checkout
        return driver.run(order["command"], names, order["check"], open_checkout(
            Path(order["checkout"]).resolve(), order["command"], not order["no_commit"]))
    from torch_backport.wheel_mode import open_install, without_torch
    leftover = without_torch(order["command"], order["check"])
    if leftover is not None:
        return leftover
    return driver.run(order["command"], names, order["check"], open_install,
                      order.get("expect"))
