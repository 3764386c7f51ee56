"""`apply.sh --python PY --verify`, and `--verify --model`, on this venv's torch.

Each run is the real command in a fresh process of this interpreter, as a
user runs it. On a patched build every cell holds and the command exits 0;
on a stock one it names exactly the cells of the defects that release has
(stock_expectations.verify_cells_failing_on_stock), and what to do. The
command leaves site-packages and --status as they were, and removes the
Inductor cache it made. `--model` takes a module of the user's own, written
here into a scratch directory (not one of the project's models): a
Conv1d -> BatchNorm1d encoder, compiled through every entry point.

The matrix runs this suite on one stock and one patched install of each
tier (test/harness/matrix_jobs.py: stock 2.15.0, patched 2.11.0, and the
newest short-tier release stock and patched).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

import torch

from pregrad_passes import SKIP_ISA_PROBE
from stock_expectations import verify_cells_failing_on_stock, verify_model_rows_wrong_on_stock

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "scripts" / "apply.sh"
STOCK = os.environ.get("PREGRAD_EXPECT_STOCK")
# The cells of the default topics, in the order printed.
CELLS = {
    "conv_bn_compile_fx": "conv->BN, freezing, compile_fx(symbolic_trace(m))",
    "conv_bn_inductor_compile": "conv->BN, freezing, torch._inductor.compile(symbolic_trace(m))",
    "shared_conv": "shared conv, freezing, compile_fx(symbolic_trace(m))",
    "warm_hit": "warm compile: AOTAutogradCache hit, pre-grad passes run",
    "autocast_region": "autocast region without dtype: float16 compile after bfloat16",
    "autocast_call_site": "autocast at the call site: float16 compile after bfloat16",
}
# --model compiles as the user's environment says; these runs skip the vector
# ISA probe (8-11 s a process before 2.13) as the suites' other children do:
# the rows' results do not depend on it.
WITHOUT_ISA_PROBE = {**os.environ, **SKIP_ISA_PROBE}
ENTRY_POINTS = ["compile_fx(torch.fx.symbolic_trace(m))",
                "torch._inductor.compile(torch.fx.symbolic_trace(m))",
                "compile_fx(torch.export.export(m).module())",
                "AOTInductor: aoti_compile_and_package(export(m))",
                "torch.compile(m)"]
USER_MODULE = '''
"""A user's speech encoder: Conv1d -> BatchNorm1d blocks, trained-like statistics."""
import torch
from torch import nn


def make():
    torch.manual_seed(7)
    model = nn.Sequential(nn.Conv1d(40, 48, 5, padding=2), nn.BatchNorm1d(48), nn.ReLU(),
                          nn.Conv1d(48, 24, 3, padding=1), nn.BatchNorm1d(24))
    with torch.no_grad():
        for norm in (model[1], model[4]):
            norm.running_mean.uniform_(-1, 1)
            norm.running_var.uniform_(0.5, 2)
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0, 0.2)
    return model.eval(), (torch.randn(2, 40, 50),)


class Gated(nn.Module):
    """Data-dependent control flow: no symbolic_trace, no torch.export."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 3)

    def forward(self, x):
        if x.sum() > 0:
            return self.conv(x)
        return -self.conv(x)


def make_gated():
    torch.manual_seed(7)
    return Gated().eval(), (torch.randn(1, 4, 16),)
'''


def apply_sh(*args: str, cwd: Path | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(APPLY), "--python", sys.executable, *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=900)


# The matrix hard-links files of 1 MiB or more that venvs share byte for byte
# (test/harness/venvs.py, `hardlink --ignore-time`) whenever a venv finishes
# installing, beside running jobs: such a file may take its twin's mtime.
SHARED_BY_THE_HARNESS = 1024 * 1024


def site_packages_snapshot() -> dict[str, tuple[int, int]]:
    """Every file under this venv's site-packages: (size, mtime); the size
    only for a file the harness may hard-link to a twin meanwhile."""
    site = Path(torch.__file__).resolve().parents[1]
    found = {}
    for folder, _, files in os.walk(site):
        for name in files:
            stat = os.lstat(os.path.join(folder, name))
            found[os.path.join(folder, name)] = (
                stat.st_size, stat.st_mtime_ns if stat.st_size < SHARED_BY_THE_HARNESS else 0)
    return found


def cells_printed(stdout: str) -> dict[str, bool]:
    """cell key -> whether it holds, from --verify's table."""
    found = {}
    for key, label in CELLS.items():
        line = next((line for line in stdout.splitlines() if line.startswith(label)), None)
        if line is not None:
            found[key] = line.rstrip().endswith(" holds")
    return found


README = REPO / "README.md"
README_VERIFY = re.compile(r"<!-- the --verify output[^\n]*-->\n```\n(.*?)```", re.S)
# What differs from one machine and run to the next, in the README and here.
VARYING = [(re.compile(r"\(\S*torch-backport-verify-\w+,"), "(<cache>,"),
           (re.compile(r"^torch \S+ imported from \S+, by \S+$", re.M),
            "torch <version> imported from <site>, by <python>"),
           # The distance and its column's padding (its width varies).
           (re.compile(r"off by \S+ +"), "off by <n> "),
           (re.compile(r"\(\d+ s\)"), "(<n> s)")]


def invariant(output: str) -> str:
    for pattern, shown in VARYING:
        output = pattern.sub(shown, output)
    return output


class VerifyCommandTest(unittest.TestCase):
    """One --verify run of the default topics, looked at from each side."""

    run_result: subprocess.CompletedProcess[str]
    before: dict[str, tuple[int, int]]
    after: dict[str, tuple[int, int]]
    status_before: subprocess.CompletedProcess[str]

    @classmethod
    def setUpClass(cls) -> None:
        cls.status_before = apply_sh("--status")
        cls.before = site_packages_snapshot()
        cls.run_result = apply_sh("--verify")
        cls.after = site_packages_snapshot()

    def output(self) -> str:
        return self.run_result.stdout + self.run_result.stderr

    @unittest.skipUnless(torch.__version__.startswith("2.11.0") and not STOCK,
                         "the README shows patched 2.11.0's run")
    def test_the_readme_shows_what_it_prints(self) -> None:
        shown = README_VERIFY.search(README.read_text())
        self.assertIsNotNone(shown, f"{README} has no --verify output block")
        assert shown is not None
        self.assertEqual(invariant(shown.group(1)), invariant(self.run_result.stdout))

    def test_verify_exits_zero_and_every_cell_holds(self) -> None:
        self.assertEqual(cells_printed(self.run_result.stdout),
                         dict.fromkeys(CELLS, True), self.output())
        self.assertEqual(self.run_result.returncode, 0, self.output())
        self.assertIn(f"verify: all {len(CELLS)} cells hold", self.run_result.stdout)

    def test_verify_names_exactly_the_cells_this_build_gets_wrong(self) -> None:
        failing = verify_cells_failing_on_stock(STOCK) if STOCK else set()
        self.assertEqual(cells_printed(self.run_result.stdout),
                         {key: key not in failing for key in CELLS}, self.output())
        self.assertEqual(self.run_result.returncode, 1 if failing else 0, self.output())
        if failing:
            self.assertIn(f"verify: {len(failing)} of {len(CELLS)} cells do not hold",
                          self.run_result.stdout)
            if "conv_bn_compile_fx" in failing:
                self.assertIn("the late pre-grad passes fold each BatchNorm into its conv",
                              self.run_result.stdout)
            self.assertRegex(self.run_result.stdout, r"the files are stock; `scripts/apply\.sh "
                             rf"--python {re.escape(sys.executable)}` fixes this")

    def test_verify_writes_nothing_into_site_packages(self) -> None:
        self.assertEqual(self.after, self.before)
        status_after = apply_sh("--status")
        self.assertEqual((status_after.returncode, status_after.stdout),
                         (self.status_before.returncode, self.status_before.stdout))

    def test_verify_removes_its_inductor_cache(self) -> None:
        cache = re.search(r"an Inductor cache of its own \((\S+), removed at the end\)",
                          self.run_result.stdout)
        self.assertIsNotNone(cache, self.output())
        self.assertFalse(Path(cache[1]).exists())


class VerifyWithoutCompilerTest(unittest.TestCase):
    def test_without_a_cpp_compiler_it_names_what_to_install(self) -> None:
        """A -slim image has no g++: said before any compile, exit 1."""
        env = {**os.environ, "CXX": "/nonexistent/g++"}
        result = apply_sh("--verify", env=env)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("has no C++ compiler it can use", result.stderr)
        self.assertIn("apt-get install g++", result.stderr)
        self.assertEqual(cells_printed(result.stdout), {})


class VerifyWhichTorchTest(unittest.TestCase):
    """The torch the process imports is the one measured, and named."""

    def setUp(self) -> None:
        venv = Path(sys.prefix)
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{venv.name}-verify-", dir=venv.parent))
        self.addCleanup(shutil.rmtree, self.scratch)

    def test_another_torch_first_on_sys_path_is_named(self) -> None:
        """A hard-linked copy of this torch on PYTHONPATH: the header says
        which torch ran and that --status reads another (the topic without
        cells keeps the run to its header)."""
        shadow = self.scratch / "shadow"
        shadow.mkdir()
        subprocess.run(["cp", "-al", str(Path(torch.__file__).parent), str(shadow / "torch")],
                       check=True)
        env = {**os.environ, "PYTHONPATH": str(shadow)}
        result = apply_sh("--verify", "--topic", "cpu-isa-probe", env=env)
        self.assertIn(f"imported from {shadow / 'torch'}", result.stdout, result.stderr)
        self.assertIn("warning: this is not the torch --status reads", result.stdout)

    def test_a_torch_that_does_not_import_is_named(self) -> None:
        broken = self.scratch / "broken" / "torch"
        broken.mkdir(parents=True)
        (broken / "__init__.py").write_text('raise RuntimeError("a broken build")\n')
        env = {**os.environ, "PYTHONPATH": str(broken.parent)}
        result = apply_sh("--verify", env=env)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("cannot import torch (RuntimeError: a broken build)", result.stderr)
        self.assertNotIn("Traceback", result.stderr)


class VerifyModelTest(unittest.TestCase):
    """--verify --model on a module of the user's own: one run, looked at
    from each side."""

    scratch: Path
    run_result: subprocess.CompletedProcess[str]

    @classmethod
    def setUpClass(cls) -> None:
        cls.scratch = Path(tempfile.mkdtemp(prefix="verify-model-"))
        (cls.scratch / "user_encoder.py").write_text(textwrap.dedent(USER_MODULE))
        cls.run_result = apply_sh("--verify", "--model", "user_encoder:make", cwd=cls.scratch,
                                  env=WITHOUT_ISA_PROBE)

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.scratch)

    def rows(self, stdout: str) -> dict[str, str]:
        """entry point -> its verdict word."""
        found = {}
        for entry in ENTRY_POINTS:
            line = next((line for line in stdout.splitlines() if line.startswith(entry)), "")
            words = line[len(entry):].split()
            found[entry] = ("not applicable" if "not applicable:" in line
                            else words[1] if len(words) > 1 else "missing")
        return found

    def output(self) -> str:
        return self.run_result.stdout + self.run_result.stderr

    def test_users_conv_bn_model_is_right_through_every_entry_point(self) -> None:
        self.assertEqual(self.rows(self.run_result.stdout),
                         dict.fromkeys(ENTRY_POINTS, "right"), self.output())
        self.assertEqual(self.run_result.returncode, 0, self.output())

    def test_users_model_rows_name_exactly_what_this_build_gets_wrong(self) -> None:
        wrong = set(verify_model_rows_wrong_on_stock(STOCK)) if STOCK else set()
        self.assertEqual(self.rows(self.run_result.stdout),
                         {entry: "WRONG" if entry in wrong else "right"
                          for entry in ENTRY_POINTS}, self.output())
        self.assertEqual(self.run_result.returncode, 1 if wrong else 0, self.output())
        if wrong:
            self.assertIn("results: with freezing, compile_fx and torch._inductor.compile "
                          "fold a BatchNorm into its conv wrongly", self.run_result.stdout)
            self.assertIn("the files are stock;", self.run_result.stdout)

    def test_an_entry_point_the_model_cannot_go_through_is_not_a_failure(self) -> None:
        result = apply_sh("--verify", "--model", "user_encoder.py:make_gated", cwd=self.scratch,
                          env=WITHOUT_ISA_PROBE)
        output = result.stdout + result.stderr
        self.assertEqual(self.rows(result.stdout), {
            ENTRY_POINTS[0]: "not applicable", ENTRY_POINTS[1]: "not applicable",
            ENTRY_POINTS[2]: "not applicable", ENTRY_POINTS[3]: "not applicable",
            ENTRY_POINTS[4]: "right"}, output)
        self.assertEqual(result.returncode, 0, output)

    def test_a_factory_that_is_not_there_is_named(self) -> None:
        result = apply_sh("--verify", "--model", "user_encoder:make_it", cwd=self.scratch)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("--model user_encoder:make_it: user_encoder has no callable 'make_it'",
                      result.stderr)


if __name__ == "__main__":
    unittest.main()
