"""The configured linters, run by test.sh before the matrix: flake8 (setup.cfg:
100 columns) over the repository's Python, and mypy --strict over the
package and maint/ (setup.cfg's [mypy] files). They run side by side in a
venv of their own, $PREGRAD_CACHE/venvs/lint, made from requirements/lint.txt
and remade when that file changes; their output goes to <logs>/lint.log.

`python3 test/harness/lint.py` runs them alone (exit 0 clean, 1 findings or
no venv)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path
from typing import List, TextIO, Tuple

HARNESS = Path(__file__).resolve().parent
REPO = HARNESS.parents[1]
if str(HARNESS) not in sys.path:
    sys.path.insert(0, str(HARNESS))
import venvs  # noqa: E402

REQUIREMENTS = REPO / "requirements" / "lint.txt"
FLAKE8_PATHS = ("torch_backport", "maint", "scripts", "test", "bench")
SHOWN_FINDINGS = 30


def lint_venv() -> Path:
    return venvs.venvs_dir() / "lint"


def ensure_lint_venv(log: TextIO) -> Path:
    """The linters' venv, made (or remade) where requirements/lint.txt changed."""
    venv = lint_venv()
    stamp = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    ready = venv / ".pregrad-ready"
    with venvs.locked(venv):
        if ready.is_file() and ready.read_text() == stamp:
            return venv
        subprocess.run(["rm", "-rf", str(venv)], check=True)
        python = venvs.python_of(venv)
        if not (venvs.run_into(log, [venvs.base_interpreter(), "-m", "venv", venv])
                and venvs.run_into(log, [python, *venvs.QUIET_PIP, "install", "-r",
                                         REQUIREMENTS])):
            raise venvs.InstallFailed(f"the linters' venv ({REQUIREMENTS.name}); see {log.name}")
        ready.write_text(stamp)
    return venv


def run_linters(venv: Path, log: TextIO) -> Tuple[bool, List[str]]:
    """flake8 and mypy at once (two cores); whether both passed, and their findings."""
    python = str(venvs.python_of(venv))
    commands = [[python, "-m", "flake8", *FLAKE8_PATHS],
                # Its cache in the venv: the checkout keeps nothing of a run.
                [python, "-m", "mypy", "--no-error-summary", "--cache-dir",
                 str(venv / "mypy-cache")]]
    running = [subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for command in commands]
    passed, findings = True, []
    for command, process in zip(commands, running):
        output, _ = process.communicate()
        log.write(f"$ {' '.join(command[1:])} (exit {process.returncode})\n{output}")
        passed = passed and process.returncode == 0
        findings += output.splitlines()
    return passed, findings


def check(logs: Path) -> bool:
    """Both linters over the checkout; one line each way, the findings on failure."""
    started = time.monotonic()
    path = logs / "lint.log"
    print(f"== lint: flake8 and mypy --strict (setup.cfg; log: {path})", flush=True)
    with open(path, "w") as log:
        try:
            passed, findings = run_linters(ensure_lint_venv(log), log)
        except venvs.InstallFailed as failure:
            print(f"test.sh: lint: {failure}", file=sys.stderr)
            return False
    if passed:
        print(f"   lint: clean in {time.monotonic() - started:.0f} s", flush=True)
        return True
    print(f"test.sh: lint: {len(findings)} finding(s); fix them (the first "
          f"{min(len(findings), SHOWN_FINDINGS)} here, all in {path}):", file=sys.stderr)
    for line in findings[:SHOWN_FINDINGS]:
        print(f"  {line}", file=sys.stderr)
    return False


if __name__ == "__main__":
    logs = REPO / "test-logs"
    logs.mkdir(exist_ok=True)
    sys.exit(0 if check(logs) else 1)
