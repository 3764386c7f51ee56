"""`--verify`: proof from the code that runs, where --status proves the files.

Runs in the target interpreter PY, which _launch.py started afresh for it
(engine.py's `verify` order), before anything imported torch: the process
gets an Inductor cache of its own (removed at the end, whatever happens)
and writes no bytecode, so it leaves site-packages and the user's caches
as they were. Then each applicable topic's cells (cells.py) run on
the torch this process imports, or, with --model, the user's own model
through every entry point (model.py); a cell that does not hold is
named with the defect it shows and what to do about it.

Exit codes: 0 every cell holds (any install, stock included); 1 one does
not, or nothing could be measured; 2 no cell for the topics named.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional, TYPE_CHECKING

from torch_backport.infra.errors import BackportError, Failed, Refused, report
from torch_backport.infra.order import Order
from torch_backport.installed.install import find_install, Install
from torch_backport.installed.state import State, Status
from torch_backport.patchset.series import primary_topic, select_topics, Topic
from torch_backport.installed.status import inspect
from torch_backport.infra.exit_codes import Exit

if TYPE_CHECKING:  # verify/cells.py imports torch: only once the process is isolated
    from torch_backport.verify.cells import Cell, CellSpec

CACHE_PREFIX = "torch-backport-verify-"
# Inductor's own switch: take the vector ISAs /proc/cpuinfo lists instead of
# probing each with a compile (8 to 11 s of a cold process on 2 cores; the
# cells' results do not depend on the vector width). Not for --model: the
# user's model is compiled as it is in production.
SKIP_ISA_PROBE = ("TORCHINDUCTOR_VEC_ISA_OK", "1")
NO_COMPILER = (
    "Inductor's CPU backend compiles C++, and this machine has no C++ compiler it can use "
    "({why}).\nInstall one and run --verify again: apt-get install g++ (Debian, Ubuntu and "
    "their -slim images), dnf install gcc-c++, apk add g++, or set CXX to a compiler's "
    "path. Nothing was compiled; torch.compile and compile_fx on the CPU fail the same way "
    "here.")
NO_HEADERS = (
    "Inductor's CPU kernels include Python's C headers, and this Python has none ({header} "
    "is missing).\nInstall them and run --verify again: apt-get install python{version}-dev "
    "(Debian, Ubuntu), dnf install python3-devel, apk add python3-dev. Nothing was "
    "compiled; torch.compile and compile_fx on the CPU fail the same way here.")


def isolate(model: bool) -> Path:
    """A fresh Inductor (and Triton) cache for this process, set before
    torch is imported, which reads them once. (No bytecode is written:
    cli.execute set PYTHONDONTWRITEBYTECODE before this process started, so
    that it holds for this package's own imports and every child too.)"""
    if "torch" in sys.modules:
        raise Failed("--verify must start before torch is imported (an internal error)")
    cache = Path(tempfile.mkdtemp(prefix=CACHE_PREFIX))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    if not model:
        os.environ.setdefault(*SKIP_ISA_PROBE)
    return cache


def compiler_problem() -> Optional[str]:
    """Why Inductor's CPU backend cannot compile here, or None: no C++
    compiler, or no Python C headers (its kernels include Python.h)."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
        get_cpp_compiler()
    except Exception as problem:  # InvalidCxxCompiler, or a compiler that will not run
        return NO_COMPILER.format(why=f"{type(problem).__name__}: {problem}".strip())
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not header.is_file():
        version = "%d.%d" % sys.version_info[:2]
        return NO_HEADERS.format(header=header, version=version)
    return None


def topic_states(chosen: List[Topic]) -> Dict[str, Optional[Status]]:
    """Each topic's --status (None where the files cannot say)."""
    states: Dict[str, Optional[Status]] = {}
    for topic in chosen:
        try:
            states[topic.name] = inspect(find_install(topic))
        except (Refused, OSError):
            states[topic.name] = None
    return states


def imported_from(install: Install) -> List[str]:
    """The header: which torch this process runs, and a warning where it is
    not the install --status reads."""
    try:
        import torch
    except Exception as problem:  # a broken install: its files are --status's to read
        raise Failed(f"{sys.executable} cannot import torch ({type(problem).__name__}: "
                     f"{problem}); --status reads its files, --verify needs it to run") from None

    try:
        # Its import warns where there is no CUDA runtime ("No CUDA runtime
        # is found"): here, before the table, not between two of its lines.
        # (It needs setuptools; where that is missing, a cell says so.)
        import torch.utils.cpp_extension  # noqa: F401
    except ImportError:
        pass
    running = Path(torch.__file__).resolve().parent
    lines = [f"torch {torch.__version__} imported from {running}, by {sys.executable}"]
    if running != (install.site / "torch").resolve():
        lines.append(f"warning: this is not the torch --status reads ({install.site / 'torch'},"
                     f" {install.version}): another torch comes first on sys.path "
                     "(PYTHONPATH, a user site, a vendored tree); the cells measure the one "
                     "imported")
    return lines


def advice(topic: str, status: Optional[Status], command: str) -> str:
    """What to do about a topic whose cells do not all hold, from its files."""
    state = status.state if status is not None else None
    fix = f"{command} --python {sys.executable}"
    if status is not None and state is State.PRISTINE and status.series is not None:
        return (f"{topic}: the files are stock; `{fix}` fixes this "
                f"(series {status.series.base})")
    if state is not None and state.applied:
        return (f"{topic}: the files are patched ({state}), yet the code that ran is not: "
                "see the torch imported above, and the .pyc files --status names")
    if state is State.HAS_FEATURE:
        return (f"{topic}: this release has the change upstream and no series here; "
                "the cells above are what it does")
    said = status.message().splitlines()[0] if status is not None else "cannot be read"
    return f"{topic}: no series here applies as the files stand ({said}); see --status"


def measured(spec: CellSpec) -> Cell:
    """The cell, or one that says its measurement raised (traceback first)."""
    from torch_backport.verify.cells import Cell

    try:
        return spec.run()
    except Exception as problem:  # a compile that fails: reported, not a known defect
        traceback.print_exc()
        return Cell(spec.topic, spec.label, "a result", f"raised {type(problem).__name__}",
                    False, f"{spec.label}: raised {type(problem).__name__}: {problem} (the "
                    "traceback is above); not a defect this project knows", raised=True)


def run_cells(chosen: List[Topic]) -> List[Cell]:
    """Measure and print each chosen topic's cells, as each is measured."""
    from torch_backport.verify.cells import CELLS

    cells: List[Cell] = []
    print(f"{'cell':<62} {'expected':<22} {'actual':<18} verdict", flush=True)
    for topic in chosen:
        if topic.name not in CELLS:
            print(f"({topic.name}: no cell here; its behaviour is a process's start-up, "
                  "test/dynamo/test_cpu_isa_probe.py)")
        for spec in CELLS.get(topic.name, []):
            cell = measured(spec)
            verdict = "holds" if cell.holds else "DOES NOT HOLD"
            print(f"{cell.label:<62} {cell.expected:<22} {cell.actual:<18} {verdict}",
                  flush=True)
            cells.append(cell)
    return cells


def verdict(cells: List[Cell], states: Dict[str, Optional[Status]], command: str,
            started: float) -> int:
    """The closing lines: every defect shown, and what to do about each
    topic whose cells show one (a cell that raised shows none)."""
    seconds = time.monotonic() - started
    if not cells:
        print(f"{command}: --verify has no cell for the topics named; run it without --topic "
              "(the default topics) or with --topic all", file=sys.stderr)
        return Exit.USAGE
    failed = [cell for cell in cells if not cell.holds]
    if not failed:
        print(f"verify: all {len(cells)} cells hold ({seconds:.0f} s)")
        return Exit.OK
    print(f"verify: {len(failed)} of {len(cells)} cells do not hold ({seconds:.0f} s):")
    for defect in dict.fromkeys(cell.defect for cell in failed):
        print(f"  {defect}")
    for topic in dict.fromkeys(cell.topic for cell in failed if not cell.raised):
        print(f"  {advice(topic, states.get(topic), command)}")
    return Exit.FAILED


def model_verdict(spec: str, work: Path, states: Dict[str, Optional[Status]],
                  command: str) -> int:
    """--model's table, then what its rows mean: a module-graph entry point
    that is wrong is the results defect (the primary topic's to fix)."""
    from torch_backport.verify.cells import MODULE_GRAPH_FOLD
    from torch_backport.verify.model import closing_lines, MODULE_GRAPH_ENTRY_POINTS, verify_model

    words = verify_model(spec, work)
    if any(words[label] == "WRONG" for label in MODULE_GRAPH_ENTRY_POINTS):
        topic = primary_topic().name
        print(f"  {MODULE_GRAPH_FOLD}")
        print(f"  {advice(topic, states.get(topic), command)}")
    for line in closing_lines(words):
        print(line)
    return Exit.FAILED if any(word in ("WRONG", "raised") for word in words.values()) \
        else Exit.OK


def run(order: Order) -> int:
    """The engine's VERIFY order, in a fresh process of PY."""
    started = time.monotonic()
    model = order.model
    cache = isolate(bool(model))
    try:
        chosen = select_topics(list(order.topics) or None)
        states = topic_states(chosen)
        install = find_install(chosen[0])
        print(f"--verify{' --model ' + model if model else ''}: a fresh process, with an "
              f"Inductor cache of its own ({cache}, removed at the end)", flush=True)
        for line in imported_from(install):
            print(line, flush=True)
        print("files (--status): " + ", ".join(
            f"{name} {status.state if status is not None else 'unreadable'}"
            for name, status in states.items()), flush=True)
        problem = compiler_problem()
        if problem:
            print(problem, file=sys.stderr)
            return Exit.FAILED
        if model:
            return model_verdict(model, cache, states, order.invoked_as)
        return verdict(run_cells(chosen), states, order.invoked_as, started)
    except BackportError as problem:
        return report(problem, order.invoked_as)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
