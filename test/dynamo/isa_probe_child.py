"""Child process of test_cpu_isa_probe.py: probe scenarios, in turn.

Usage: isa_probe_child.py FAKE_TORCH_DIR LIBRARIES SCENARIO=CACHE_DIR [SCENARIO=CACHE_DIR ...]

Each scenario runs Inductor's CPU vector-ISA probe (`valid_vec_isa_list()`,
`pick_vec_isa()`) once, from empty functools caches (those of a new process,
or emptied by isa_probe.forget_probe_answers() after the scenario before it)
and in a cache directory of its own (TORCHINDUCTOR_CACHE_DIR), with what the
scenario changes in torch undone after it. The cache directory starts with
the test libraries of LIBRARIES (a directory of the test's), and what the
scenario compiled goes there: a library is named by the hash of its source
and its command line, and the probe compiles only one it does not find, so
each is compiled once; the probe's `.load_ok` marks never move (kept_kernels.py). The probe
children (`python -c "...cdll.LoadLibrary(<test library>)"`) are observed by
wrapping `subprocess.run` and `subprocess.check_call`, which is how the stock
(`check_call`) and the changed (`run`) probe start them. Scenarios:

  reference        the probe before torch 2.13: the child runs `import torch`
                   before the dlopen, in the environment of
                   python_subprocess_env(); the answer the others must give
  no_torch         the probe under test, with FAKE_TORCH_DIR (a `torch`
                   package whose import raises) first on the probe children's
                   PYTHONPATH, after the real torch is imported here
  broken_lib_path  the probe under test, with `VecISA._build_probe_env`
                   returning an LD_LIBRARY_PATH without torch's lib dir, so a
                   test library that needs libtorch_cpu cannot be loaded
                   before `import torch`; also reports how a cold dlopen of
                   each probed library fares in that environment

Prints, as its last line, a JSON list with one object per scenario:
"answer" (each valid ISA with its arch flags and float lanes, and the picked
one), "probe_children" (how many probe children were started), and per
scenario "import_torch_in_child" or "cold_load_errors".
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch._inductor import cpu_vec_isa
from torch._inductor.utils import python_subprocess_env

import kept_kernels
from isa_probe import forget_probe_answers

# The probe child of torch 2.9-2.12, verbatim.
PRE_2_13_PROBE_SCRIPT = """
import torch
from ctypes import cdll
cdll.LoadLibrary("__lib_path__")
"""
LIBRARY = re.compile(r'cdll\.LoadLibrary\("([^"]+)"\)')


def describe() -> dict[str, object]:
    """The probe's answer in this process: each valid ISA with its arch flags
    (which carry the avx512_bf16 / amx_fp16 sub-probes) and float lanes, in
    Inductor's order of preference, and the ISA pick_vec_isa() picks."""
    picked = cpu_vec_isa.pick_vec_isa()
    return {
        "valid": [
            [str(isa), isa.build_arch_flags(), isa.nelements(torch.float)]
            for isa in cpu_vec_isa.valid_vec_isa_list()
        ],
        "picked": str(picked),
    }


@contextlib.contextmanager
def observe_probe_children() -> Iterator[list[str]]:
    """The test library of every probe child started inside the block."""
    libraries: list[str] = []
    originals = subprocess.run, subprocess.check_call

    def observing(start: Callable[..., Any]) -> Callable[..., Any]:
        def observed(args: Any, *rest: Any, **kwargs: Any) -> Any:
            if isinstance(args, list) and args[:2] == [sys.executable, "-c"]:
                if found := LIBRARY.search(args[2]):
                    libraries.append(found[1])
            return start(args, *rest, **kwargs)

        return observed

    # The probe calls them through the module (`subprocess.run(...)`).
    subprocess.run, subprocess.check_call = map(observing, originals)
    try:
        yield libraries
    finally:
        subprocess.run, subprocess.check_call = originals


def env_without_torch_lib() -> dict[str, str]:
    """python_subprocess_env() with torch's lib dir taken off LD_LIBRARY_PATH:
    the loader can then find libtorch_cpu only if the process has loaded it."""
    env = python_subprocess_env()
    lib_dir = os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib"))
    kept = [
        entry
        for entry in env.get("LD_LIBRARY_PATH", "").split(os.pathsep)
        if entry and os.path.realpath(entry) != lib_dir
    ]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(kept)
    return env


def last_stderr_line(args: list[str], env: dict[str, str]) -> str | None:
    """None if the child exits 0, else the last line of its stderr."""
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    return None if result.returncode == 0 else result.stderr.strip().splitlines()[-1]


def run_scenario(scenario: str, fake_torch_dir: str) -> dict[str, object]:
    report: dict[str, object] = {}
    if scenario == "reference":
        cpu_vec_isa.VecISA._avx_py_load = PRE_2_13_PROBE_SCRIPT
        # Unused by torch 2.9-2.12; from 2.13 the probe child's environment.
        cpu_vec_isa.VecISA._build_probe_env = staticmethod(python_subprocess_env)
    elif scenario == "no_torch":
        # python_subprocess_env() gives the children this as PYTHONPATH.
        os.environ["TORCH_CUSTOM_PYTHONPATH"] = os.pathsep.join([fake_torch_dir, *sys.path])
        report["import_torch_in_child"] = last_stderr_line(
            [sys.executable, "-c", "import torch"], python_subprocess_env()
        )
    elif scenario == "broken_lib_path":
        cpu_vec_isa.VecISA._build_probe_env = staticmethod(env_without_torch_lib)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")

    with observe_probe_children() as libraries:
        report["answer"] = describe()
    report["probe_children"] = len(libraries)
    if scenario == "broken_lib_path":
        errors = set()
        for library in libraries:
            load = f"from ctypes import cdll; cdll.LoadLibrary({library!r})"
            error = last_stderr_line([sys.executable, "-c", load], env_without_torch_lib())
            if error is not None:
                errors.add(error)
        report["cold_load_errors"] = sorted(errors)
    return report


@contextlib.contextmanager
def scenario_undone(cache_dir: str) -> Iterator[None]:
    """The scenario in `cache_dir`, from empty probe caches; what it changes
    in VecISA and the environment is put back after it."""
    changed = ("_avx_py_load", "_build_probe_env")
    saved = {name: cpu_vec_isa.VecISA.__dict__[name] for name in changed
             if name in cpu_vec_isa.VecISA.__dict__}
    environ = dict(os.environ)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    forget_probe_answers()
    try:
        yield
    finally:
        for name in changed:
            if name in saved:
                setattr(cpu_vec_isa.VecISA, name, saved[name])
            elif name in cpu_vec_isa.VecISA.__dict__:
                delattr(cpu_vec_isa.VecISA, name)
        os.environ.clear()
        os.environ.update(environ)
        forget_probe_answers()


def main(fake_torch_dir: str, libraries: Path, scenarios: list[str]) -> None:
    reports = []
    for item in scenarios:
        scenario, _, cache_dir = item.partition("=")
        kept_kernels.copy_missing(libraries, Path(cache_dir))
        with scenario_undone(cache_dir):
            reports.append(run_scenario(scenario, fake_torch_dir))
        kept_kernels.copy_missing(Path(cache_dir), libraries)
    print(json.dumps(reports))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])
