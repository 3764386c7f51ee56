"""scripts/gpu-check.sh where there is no GPU: what it must not do, and its usage.

The check itself needs a CUDA device (docs/gpu-check.md).
scripts/gpu-check.sh is a shim: the check is test/harness/gpu_check.py, run
by python3. Here, on the stock 2.11.0 venv's python with CUDA hidden
(CUDA_VISIBLE_DEVICES="", so that a GPU machine running this suite gets the
same answer), it must say "no CUDA device" and exit 0 having written nothing:
no venv or download under PREGRAD_CACHE, no log under PREGRAD_LOGS, no
temporary directory, nothing applied to the install. Its usage errors exit 2.
Its RECORD check, the one that ends every real run, is torch_backport.infra.record
run by PY: checked here on a small install, pristine and then damaged.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

from fake_install import (APPLY, INSTALLED, InstallTestCase, REPO, source_python, STATE_DIRNAME,
                          STOCK, torch_site)

sys.path.insert(0, str(REPO / "test" / "harness"))
from target_python import read_record  # noqa: E402

GPU_CHECK = REPO / "scripts" / "gpu-check.sh"


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = subprocess.run([str(GPU_CHECK), *args], capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, timeout=120)
    return result.returncode, result.stdout + result.stderr


def install_state(site: Path) -> dict[str, object]:
    """What an apply would change: the files the topics touch (bytes and
    mtime) and this project's state directories beside torch."""
    files = {rel: (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns)
             for rel in INSTALLED for path in [site / rel]}
    states = sorted(p.name for p in site.iterdir() if p.name.startswith(STATE_DIRNAME))
    return {"files": files, "state directories": states}


class GpuCheckTest(InstallTestCase):
    def test_without_cuda_it_says_so_and_writes_nothing(self) -> None:
        python = source_python(STOCK)
        site = torch_site(python)
        before = install_state(site)
        dirs = {name: self.tmp / name for name in ("cache", "logs", "tmpdir", "wheels")}
        for path in dirs.values():
            path.mkdir()
        env = {"PREGRAD_CACHE": str(dirs["cache"]), "PREGRAD_LOGS": str(dirs["logs"]),
               "TMPDIR": str(dirs["tmpdir"]), "PIP_NO_INDEX": "1", "CUDA_VISIBLE_DEVICES": ""}
        code, output = run("--python", python, "--topic", "all",
                           "--test-deps", str(dirs["wheels"]), env=env)
        self.assertEqual(code, 0, output)
        self.assertRegex(output, r"^gpu-check\.sh: no CUDA device \(torch 2\.11\.0\S* at "
                                 f"{re.escape(python)} sees none\\): nothing to check\n$")
        for name in ("cache", "logs", "tmpdir"):
            self.assertEqual(list(dirs[name].iterdir()), [], name)
        self.assertEqual(install_state(site), before)
        status = subprocess.run([str(APPLY), "--python", python, "--status"],
                                capture_output=True, text=True)
        self.assertEqual(status.returncode, 0, status.stdout + status.stderr)
        self.assertNotIn("\npatched", status.stdout)

    def test_python_is_required(self) -> None:
        code, output = run()
        self.assertEqual(code, 2, output)
        self.assertIn("gpu-check.sh: --python PY is required", output)
        code, output = run("--", "-k", "timing")
        self.assertEqual(code, 2, output)
        self.assertIn("--python PY is required", output)

    def test_a_missing_interpreter_is_named(self) -> None:
        missing = self.tmp / "no-such-venv" / "bin" / "python"
        code, output = run("--python", str(missing))
        self.assertEqual(code, 2, output)
        self.assertEqual(output, f"gpu-check.sh: --python {missing}: no such interpreter\n")
        code, output = run("--python", "no-such-python-here")
        self.assertEqual(code, 2, output)
        self.assertIn("--python no-such-python-here: no such interpreter on PATH", output)

    def test_a_python_without_torch_is_named(self) -> None:
        if subprocess.run(["python3", "-c", "import torch"], capture_output=True).returncode == 0:
            self.skipTest("the system's python3 imports torch here")
        code, output = run("--python", "python3")
        self.assertEqual(code, 2, output)
        self.assertRegex(output, r"^gpu-check\.sh: --python python3 \(/\S+\) cannot import torch: "
                                 r".*No module named 'torch'\n$")

    def test_release_is_gone_and_unknown_arguments_are_usage_errors(self) -> None:
        code, output = run("--release", "2.11.0")
        self.assertEqual(code, 2, output)
        self.assertIn("--release is gone: the torch checked is PY's (--python PY", output)
        code, output = run("--python", source_python(STOCK), "--bogus")
        self.assertEqual(code, 2, output)
        self.assertIn("unknown argument: --bogus", output)

    def test_help_names_python(self) -> None:
        code, output = run("--help")
        self.assertEqual(code, 0, output)
        self.assertTrue(output.startswith("Usage: scripts/gpu-check.sh --python PY "), output)
        self.assertIn("--test-deps DIR", output)
        self.assertIn("Exit codes:", output)
        module = subprocess.run([sys.executable, str(REPO / "test" / "harness" / "gpu_check.py"),
                                 "--help"], capture_output=True, text=True)
        self.assertEqual((module.returncode, module.stdout), (0, output))

    def test_offline_requirements_pin_the_test_requirements(self) -> None:
        """Each line of gpu-check.txt (a pin, with its Python marker where
        test.txt has one) is a line of test.txt."""
        def pins(name: str) -> list[str]:
            lines = (REPO / "requirements" / name).read_text().splitlines()
            return [line for line in lines if line and not line.startswith("#")]

        offline, test = pins("gpu-check.txt"), pins("test.txt")
        self.assertEqual(sorted({line.split("==")[0] for line in offline}),
                         ["expecttest", "hypothesis", "pytest"])
        self.assertEqual([line for line in offline if line not in test], [])
        for name in ("expecttest", "hypothesis", "pytest"):
            self.assertEqual([line for line in offline if line.startswith(f"{name}==")],
                             [line for line in test if line.startswith(f"{name}==")], name)

    def test_the_record_check_runs_torch_backport_record_in_py(self) -> None:
        install = self.install()
        self.assertEqual(read_record(str(install.python)), (len(INSTALLED), []))
        changed, removed = INSTALLED[0], INSTALLED[-1]
        install.path(changed).write_bytes(install.path(changed).read_bytes() + b"\n")
        install.path(removed).unlink()
        count, wrong = read_record(str(install.python)) or (0, [])
        self.assertEqual((count, sorted(wrong)),
                         (len(INSTALLED), sorted([changed, f"{removed} (missing)"])))
        # One RECORD digest in the project: torch_backport/infra/record.py's.
        for name in ("gpu_check.py", "target_python.py"):
            text = (REPO / "test" / "harness" / name).read_text()
            for hashing in ("base64", "hashlib", "sha256("):
                self.assertNotIn(hashing, text, name)
