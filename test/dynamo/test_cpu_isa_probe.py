"""Inductor's CPU vector-ISA probe (opt-in topic cpu-isa-probe), on the CPU.

`valid_vec_isa_list()` dry-compiles a test library per ISA and has a child
Python dlopen it. Torch 2.13 (pytorch#183515) stops importing torch in that
child on Linux and puts `<torch>/lib` on its LD_LIBRARY_PATH instead; 2.14
retries after `import torch` when the cold dlopen fails (#189900) and leaves a
`<library>.load_ok` marker so later processes start no child (#190561).

Every probe is real: the test libraries are compiled and loaded, nothing in
torch is replaced but the probe script or environment a scenario is about.
The first run of every scenario is one child process (isa_probe_child.py),
the scenarios one after another, each from emptied functools caches (where
the probe keeps its answers) with what it changed in torch undone after it,
and each in a new TORCHINDUCTOR_CACHE_DIR of its own, so no `.load_ok`
marker carries over; a second run of a scenario (the warm start) is a
process of its own. Each runs once per class. The test libraries, named by
the hash of their source and command line, are compiled once and copied into
each new cache directory (the probe compiles only a library it does not
find), and kept between runs with the matrix's kernels (kept_kernels.py): the
probe's children and answers are what the tests count, and the markers that
decide whether a child starts never move.
The class runs the real probe (isa_probe.real_probe()), where the other
suites take the ISAs /proc/cpuinfo lists (TORCHINDUCTOR_VEC_ISA_OK=1); one
test checks that the two answers agree here.
The answer compared is each valid ISA with its arch flags and float lanes,
and the picked ISA. stock_expectations.py says which tests fail on which
stock release.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
import contextlib
import tempfile
import unittest
from collections.abc import Sequence
from pathlib import Path

import torch
from torch._inductor import config as inductor_config
from torch._inductor.cpu_vec_isa import pick_vec_isa
from torch._inductor.test_case import TestCase
from torch._inductor.utils import run_and_get_cpp_code

import kept_kernels
from isa_probe import forget_probe_answers, real_probe
from isa_probe_child import describe

HERE = Path(__file__).resolve().parent
# Every scenario's first run, in one child process (isa_probe_child.py).
FIRST_RUNS = ("reference", "no_torch", "broken_lib_path")
FAKE_TORCH_MESSAGE = "the ISA probe child imported torch"
NO_LIBTORCH_CPU = (
    "OSError: libtorch_cpu.so: cannot open shared object file: No such file or directory"
)
# The step of the vectorized loop of a 1-D kernel: Inductor writes
# `x0+=static_cast<int64_t>(16L)` for 16 float lanes.
LOOP_STEP = re.compile(r"for\(int64_t x0=[^;]*;[^;]*; x0\+=static_cast<int64_t>\((\d+)L\)\)")


@unittest.skipUnless(
    sys.platform == "linux" and platform.machine() == "x86_64",
    "the probe without `import torch` is Linux-only; the ISAs checked are x86's",
)
class CpuIsaProbeTests(TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls._real_probe = contextlib.ExitStack()
        cls._real_probe.enter_context(real_probe())
        cls._tmp = tempfile.TemporaryDirectory(prefix="isa-probe-")
        cls.root = Path(cls._tmp.name)
        fake_torch = cls.root / "fake-torch" / "torch"
        fake_torch.mkdir(parents=True)
        (fake_torch / "__init__.py").write_text(f"raise ImportError({FAKE_TORCH_MESSAGE!r})\n")
        cls.libraries = cls.root / "test-libraries"
        cls.libraries.mkdir()
        cls.library_store = kept_kernels.probe_library_store()
        if cls.library_store is not None:
            kept_kernels.seed(cls.libraries, cls.library_store)
        cls._runs: dict[str, list[dict]] = {}

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.library_store is not None:
            kept_kernels.add(cls.libraries, cls.library_store)
        cls._tmp.cleanup()
        cls._real_probe.close()
        super().tearDownClass()

    def scenario(self, name: str, run: int = 1) -> dict:
        """The report of the `run`-th process of scenario `name` (see
        isa_probe_child.py), all of whose processes share one cache dir.
        The first run of every scenario is one process, each from empty probe
        caches in a cache dir of its own; a later run is a process of its own.
        Each runs once per class."""
        if not self._runs:
            self._runs.update((scenario, [report]) for scenario, report in zip(
                FIRST_RUNS, self.child_process(FIRST_RUNS)))
        runs = self._runs[name]
        while len(runs) < run:
            runs += self.child_process([name])
        return runs[run - 1]

    def child_process(self, scenarios: Sequence[str]) -> list[dict]:
        result = subprocess.run(
            [sys.executable, str(HERE / "isa_probe_child.py"), str(self.root / "fake-torch"),
             str(self.libraries),
             *(f"{name}={self.root / f'cache-{name}'}" for name in scenarios)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        return json.loads(result.stdout.splitlines()[-1])

    def reference(self) -> dict:
        """The answer of the probe before 2.13, whose child imports torch."""
        return self.scenario("reference")["answer"]

    def test_probe_answer_matches_the_pre_2_13_probe(self) -> None:
        """The changed probe (here, in this process) finds the same ISAs, arch
        flags and pick as a probe whose child imports torch, and on this x86
        machine at least one ISA, so vectorization stays on."""
        self.assertNotEqual(self.reference()["valid"], [])
        self.assertEqual(describe(), self.reference())

    def test_cpuinfo_knob_gives_the_probe_answer(self) -> None:
        """TORCHINDUCTOR_VEC_ISA_OK=1, which the other suites and every test's
        child process set to skip the probe, gives the answer of the real
        probe on this machine: their kernels are the ones the probe's would be."""
        probed = describe()
        with inductor_config.patch({"cpp.vec_isa_ok": True}):
            forget_probe_answers()
            try:
                from_cpuinfo = describe()
            finally:
                forget_probe_answers()
        self.assertEqual(from_cpuinfo, probed)

    def test_compiled_kernel_uses_the_picked_isa_width(self) -> None:
        """A torch.compile'd elementwise function equals eager, and its C++
        kernel steps through the data by the picked ISA's float lanes: the
        probe's answer is what the code generator uses."""

        def fn(x: torch.Tensor) -> torch.Tensor:
            return torch.sin(x) * 2 + 1

        x = torch.randn(1024)
        torch._dynamo.reset()
        result, code = run_and_get_cpp_code(torch.compile(fn), x)
        self.assertEqual(result, fn(x))
        isa = pick_vec_isa()
        self.assertTrue(isa, "no valid vector ISA")
        self.assertEqual(LOOP_STEP.findall(code), [str(isa.nelements(torch.float))])

    def test_probe_child_does_not_import_torch(self) -> None:
        """With a `torch` that raises on import first on the probe children's
        PYTHONPATH (it does raise there), the probe still gives the reference
        answer: its children never import torch. Stock 2.9-2.12 find no ISA."""
        no_torch = self.scenario("no_torch")
        self.assertEqual(
            no_torch["import_torch_in_child"], f"ImportError: {FAKE_TORCH_MESSAGE}"
        )
        self.assertEqual(no_torch["answer"], self.reference())

    def test_cold_dlopen_failure_falls_back_to_import_torch(self) -> None:
        """With torch's lib dir off the probe children's LD_LIBRARY_PATH, a
        test library that needs libtorch_cpu fails to load cold (checked in a
        child of its own), yet the probe gives the reference answer: the child
        imports torch and loads it again. Stock 2.13 has no retry and loses
        the ISAs; before 2.13 the child always imports torch."""
        broken = self.scenario("broken_lib_path")
        self.assertEqual(
            broken["cold_load_errors"], [NO_LIBTORCH_CPU], "the cold dlopen did not break"
        )
        self.assertEqual(broken["answer"], self.reference())

    def test_second_process_starts_no_probe_child(self) -> None:
        """A second process on the cache dir of a probe that succeeded starts
        no probe child (the `.load_ok` markers) and gives the same answer."""
        first = self.scenario("no_torch")
        second = self.scenario("no_torch", run=2)
        self.assertGreater(first["probe_children"], 0)
        self.assertEqual(
            (second["probe_children"], second["answer"]), (0, self.reference())
        )
