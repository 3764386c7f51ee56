"""Run torch_backport from its own directory under any Python 3.9+, without
putting anything on sys.path.

`python3 _launch.py apply ARGS` is scripts/apply.sh; `PY _launch.py engine
ORDER` runs a parsed request in the target interpreter PY. The package is
loaded from this file's directory by path, so PY finds its own torch (its
sys.path, PYTHONPATH included) and never the site-packages this command may
be installed in.
"""

import signal
import sys


def _interrupted_early(signum: int, frame: object) -> None:
    # Ctrl-C while Python loads the command (the first second): nothing was
    # read or written yet.
    sys.stderr.write("interrupted (Ctrl-C); nothing was done\n")
    sys.stderr.flush()
    import os
    os._exit(128 + signal.SIGINT)  # exit_codes.Exit.INTERRUPTED, before the package loads


# A Ctrl-C that the caller ignores (a background job) stays ignored.
_CTRL_C = signal.getsignal(signal.SIGINT) != signal.SIG_IGN
if _CTRL_C:
    signal.signal(signal.SIGINT, _interrupted_early)
# The engine's image inherits SIGINT blocked from the exec that started it
# (engine.in_target): a Ctrl-C that came meanwhile is delivered now.
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402


def load_package() -> None:
    package = Path(__file__).resolve().parent
    # Running a file puts its directory first on sys.path: the package's
    # modules must load as torch_backport.*, not as top-level names.
    if sys.path and Path(sys.path[0] or ".").resolve() == package:
        del sys.path[0]
    if "torch_backport" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        "torch_backport", package / "__init__.py", submodule_search_locations=[str(package)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["torch_backport"] = module
    spec.loader.exec_module(module)


if __name__ == "__main__":
    try:
        load_package()
        from torch_backport import cli
        # From here a Ctrl-C is a KeyboardInterrupt: the command takes back
        # what it wrote, and says where the target stands.
        if _CTRL_C:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.exit(cli.from_launcher(sys.argv[1:]))
    except KeyboardInterrupt:
        # Before the command's own handler is in place (the first second),
        # or where a mode has none: one line, not a traceback.
        print("interrupted (Ctrl-C); --status tells where the target stands",
              file=sys.stderr)
        sys.exit(128 + signal.SIGINT)  # exit_codes.Exit.INTERRUPTED
