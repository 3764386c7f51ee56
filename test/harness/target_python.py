"""What scripts/gpu-check.sh (gpu_check.py) asks the interpreter whose torch
it checks, PY, each as `PY -c SNIPPET ARGS`: only PY can tell, with its own
sys.path, and it may be any Python 3.9+. Its torch and CUDA device; the test
requirements it cannot import; its Python and platform, for pip download; the
wheels of a directory whose distributions it lacks; and torch's RECORD,
checked by torch_backport.infra.record, the project's one RECORD check."""

from __future__ import annotations

import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
REQUIREMENTS = ("pytest", "hypothesis", "expecttest", "numpy")
PROBE = ("import torch\ncuda = torch.cuda.is_available()\nprint('gpu-check:', "
         "torch.__version__, cuda, torch.cuda.get_device_name(0) if cuda else '')")
IMPORTABLE = ("import importlib, sys\nfor name in sys.argv[1:]:\n    try:\n"
              "        importlib.import_module(name)\n    except Exception:\n        print(name)")
PLATFORM = ("import json, platform, sys, sysconfig\nprint(json.dumps([sysconfig.get_platform(), "
            "platform.machine(), platform.libc_ver()[1], '%d.%d' % sys.version_info[:2]]))")
DISTRIBUTIONS = ("import importlib.metadata as m\n"
                 "for d in m.distributions(): print(d.metadata['Name'])")
RECORD_CHECK = ("import sys\nsys.path.insert(0, sys.argv[1])\nfrom importlib import metadata\n"
                "from torch_backport.infra import record\ndist = metadata.distribution('torch')\n"
                "print(len(record.of_dist(dist)))\nfor rel in record.installed_mismatches(dist):\n"
                "    print(rel if dist.locate_file(rel).is_file() else rel + ' (missing)')")


def output_of(command: list[str], stderr: int | None = subprocess.STDOUT,
              env: dict[str, str] | None = None) -> tuple[int, str]:
    """`command`'s exit status and stdout (with its stderr, by default)."""
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True,
                            errors="replace")
    return result.returncode, result.stdout


def in_python(python: str, snippet: str, *args: str, path: str = "",
              stderr: int | None = subprocess.DEVNULL) -> tuple[int, str]:
    """`PY -c snippet args`, `path` first on its PYTHONPATH."""
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path + (f":{env['PYTHONPATH']}" if env.get("PYTHONPATH") else "")
    return output_of([python, "-c", snippet, *args], stderr, env)


def torch_of(python: str) -> tuple[str, bool, str]:
    """PY's torch: its version, whether it sees a CUDA device, and which.
    RuntimeError (PY's last line) if PY cannot import it."""
    code, output = in_python(python, PROBE, stderr=subprocess.STDOUT)
    lines = output.splitlines()
    if code != 0:
        raise RuntimeError(lines[-1] if lines else "")
    found = [line.split(None, 3) for line in lines if line.startswith("gpu-check: ")]
    words = (found[-1] if found else []) + ["", "", "", ""]
    return words[1], words[2] == "True", words[3].strip()


def missing_requirements(python: str, directory: str = "") -> list[str]:
    """The test requirements PY cannot import, with `directory` first on its path."""
    return in_python(python, IMPORTABLE, *REQUIREMENTS, path=directory)[1].split()


def pip_target(python: str) -> str:
    """pip download's options for PY's Python and platform (some of the
    pinned wheels are compiled: hypothesis's, numpy's)."""
    code, output = in_python(python, PLATFORM)
    if code != 0:
        return ""
    name, machine, libc, version = json.loads(output)
    if name.startswith("linux"):
        parts = libc.split(".")
        minor = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 17
        tags = [f"manylinux_2_{y}_{machine}" for y in (17, 28) if y <= max(minor, 17)]
    else:
        tags = [name.replace("-", "_").replace(".", "_")]
    return " ".join([f"--python-version {version}", *(f"--platform {tag}" for tag in tags)])


def unzip_missing(python: str, wheels: Path, into: str) -> list[str]:
    """Each wheel in `wheels` whose distribution PY lacks, unzipped into
    `into`: their names."""
    def name(text: str) -> str:
        return re.sub(r"[-_.]+", "-", text).lower()

    have = {name(line) for line in in_python(python, DISTRIBUTIONS)[1].split("\n")}
    unzipped = []
    for wheel in sorted(wheels.glob("*.whl")):
        if name(wheel.name.split("-")[0]) not in have:
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(into)
            have.add(name(wheel.name.split("-")[0]))
            unzipped.append(wheel.name)
    return unzipped


def read_record(python: str) -> tuple[int, list[str]] | None:
    """torch's RECORD in PY: how many files have a sha256, and those whose
    bytes differ; None if it could not be read (PY's error on stderr)."""
    code, output = in_python(python, RECORD_CHECK, str(REPO), stderr=None)
    lines = output.splitlines()
    if code != 0 or not lines or not lines[0].isdigit():
        return None
    return int(lines[0]), lines[1:]
