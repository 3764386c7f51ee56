"""The release tier of a release new-base has just served (--tier): what a
person ran by hand on day one, so that the day ends in an outcome.

1. `scripts/test.sh --releases R` (the stock venv, the patched copy, stock
   and patched jobs; `--short` for the short tier), its output in a log and
   its closing table kept for the report;
2. `apply.sh --verify` on the stock venv and on a patched copy of it
   (`scripts/venv.sh`, the one home of the venvs' names and making);
3. the outcome: upstream-fixed when stock's --verify names no results
   defect (torch fixed the wrong numbers itself: drop the results patches
   rather than serve them); served-candidate when the matrix and the
   patched --verify pass; otherwise tier-failed.

Nothing here imports torch: every step is a command of the clone.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

CLONE = Path(__file__).resolve().parents[1]
TEST_SH = CLONE / "scripts" / "test.sh"
VENV_SH = CLONE / "scripts" / "venv.sh"
APPLY = CLONE / "scripts" / "apply.sh"
# How --verify words a results defect that a cell found (verify/cells.py's
# LATE_FOLD and SHARED_FOLD): a stock release without one returns the
# numbers eager does.
RESULTS_DEFECT = "  results: "
LEVELS = ("full", "short", "none")

SERVED_CANDIDATE = "served-candidate"
UPSTREAM_FIXED = "upstream-fixed"
TIER_FAILED = "tier-failed"


@dataclasses.dataclass(frozen=True)
class Step:
    argv: List[str]
    code: int
    output: List[str]  # stdout's lines (the command's own words; stderr is in the log)
    seconds: float


@dataclasses.dataclass(frozen=True)
class Tier:
    outcome: str
    level: str
    matrix: Step
    stock_verify: Optional[Step]
    patched_verify: Optional[Step]

    @property
    def why(self) -> str:
        if self.outcome == UPSTREAM_FIXED:
            return ("the stock release's --verify finds no results defect: upstream fixed "
                    "the wrong numbers; propose dropping the results patches instead of "
                    "serving them")
        if self.outcome == SERVED_CANDIDATE:
            return f"the {self.level} tier passed, stock and patched, and --verify holds patched"
        failed = [name for name, step in (("the matrix", self.matrix),
                                          ("the patched --verify", self.patched_verify))
                  if step is None or step.code != 0]
        return f"{' and '.join(failed)} failed; see the logs named above"


def progress(line: str) -> None:
    print(f"== {line}", file=sys.stderr, flush=True)


def step(argv: Sequence[str], log: Path, env: Optional[Dict[str, str]] = None,
         show_progress: bool = False) -> Step:
    """Run `argv`, stdout kept (and appended to `log`), stderr to `log` (or,
    with `show_progress`, to this command's stderr: test.sh's `==` lines)."""
    started = time.monotonic()
    with open(log, "a") as sink:
        sink.write(f"$ {' '.join(argv)}\n")
        sink.flush()
        done = subprocess.run(list(argv), stdout=subprocess.PIPE,
                              stderr=None if show_progress else sink, text=True, env=env)
        sink.write(done.stdout)
    return Step(list(argv), done.returncode, done.stdout.splitlines(),
                time.monotonic() - started)


def venv_python(release: str, log: Path, *patched_copy: str) -> Optional[str]:
    made = step([str(VENV_SH), release, *patched_copy], log)
    return made.output[-1] if made.code == 0 and made.output else None


def run(release: str, level: str, logs: Path) -> Tier:
    """The release tier of `release` at `level` ("full" or "short"); every
    command's output under `logs`."""
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / "tier.log"
    argv = [str(TEST_SH), "--releases", release] + (["--short"] if level == "short" else [])
    progress(f"the {level} tier of {release}: {' '.join(argv[1:])} (log: {log}; about "
             f"{'2' if level == 'short' else '6-10'} min with its venv in place, plus "
             "about 5 min a release to download and install it)")
    matrix = step(argv, log, env={**os.environ, "PREGRAD_LOGS": str(logs / "matrix")},
                  show_progress=True)
    progress(f"--verify on the stock {release} and on a patched copy of it (log: {log})")
    stock = venv_python(release, log)
    patched = venv_python(release, log, "--patched-copy", f"torch-{release}-day-one", "--",
                          "--topic", "all")
    stock_verify = step([str(APPLY), "--python", stock, "--verify"], log) if stock else None
    patched_verify = (step([str(APPLY), "--python", patched, "--verify"], log)
                      if patched else None)
    if stock_verify is not None and results_hold(stock_verify):
        outcome = UPSTREAM_FIXED
    elif matrix.code == 0 and patched_verify is not None and patched_verify.code == 0:
        outcome = SERVED_CANDIDATE
    else:
        outcome = TIER_FAILED
    return Tier(outcome, level, matrix, stock_verify, patched_verify)


def results_hold(verify: Step) -> bool:
    """Whether --verify ran every cell (its `verify:` verdict line) and named
    no results defect: a cell that raised names its defect too."""
    ran = any(line.startswith("verify: ") for line in verify.output)
    return ran and not any(line.startswith(RESULTS_DEFECT) for line in verify.output)


def closing_table(matrix: Step) -> List[str]:
    """test.sh's closing table (from its `build suite outcome` header on)."""
    for number, line in enumerate(matrix.output):
        if line.startswith("build "):
            return matrix.output[number:]
    return matrix.output[-20:]


def report_sections(tier: Tier) -> str:
    """The Markdown the report adds: the matrix's counts, each --verify table."""
    parts = [f"## The {tier.level} tier: {tier.outcome}\n\n{tier.why}.\n",
             f"### `scripts/test.sh {' '.join(tier.matrix.argv[1:])}` (exit {tier.matrix.code}, "
             f"{tier.matrix.seconds / 60:.1f} min)\n\n```\n"
             + "\n".join(closing_table(tier.matrix)) + "\n```\n"]
    for name, verify in (("stock", tier.stock_verify), ("patched", tier.patched_verify)):
        if verify is None:
            parts.append(f"### --verify, {name}: no venv (see the log)\n")
        else:
            parts.append(f"### --verify, {name} (exit {verify.code}, {verify.seconds:.0f} s)\n\n"
                         "```\n" + "\n".join(verify.output) + "\n```\n")
    return "\n".join(parts)


def summary_line(tier: Tier) -> str:
    """The matrix's own last line (`summary: N passed, M failed`), for a commit message."""
    found = [line for line in tier.matrix.output if line.startswith("summary: ")]
    return found[-1] if found else f"test.sh exited {tier.matrix.code}"
