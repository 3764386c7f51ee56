#!/usr/bin/env python3
"""Checkout mode at PyTorch's size: each `apply.sh CHECKOUT` command's wall
time next to one bare history walk, as a ratio, in one run.

Builds (once, with `git fast-import`; reused while the parameters are the
same) a git repository shaped like a pytorch/pytorch checkout: --commits
commits over --files files, --touching of them changing the files the
topics patch. Its `release/2.11` branch holds the pristine v2.11.0 files
(taken from PY's torch) plus one unrelated commit on top, as a release
branch does. Its `main` branch goes on changing those files after the
release (a tree with local changes on top of v2.11.0: the walk stops at the
release), and `before-release` ends just before it (the files never held a
base's pristine blobs: the walk reads all of history).

The reference is what any tool reading this history pays at least once:
`git log -p HEAD -- <the files> | git patch-id --stable`. Each command runs
with a `git` shim first on PATH that counts the `git log -p` processes it
starts (the history walks). The release branch ends byte-identical to where
it started (checked), and `--status` after `--topic all` must name v2.11.0
for every topic (checked).

Usage: bench/checkout_scale.py --python PY [--commits N] [--files N]
       [--touching N] [--work DIR] [--baseline-rev REV]
  --python PY        a torch 2.11.0 interpreter (its files are the pristine
                     v2.11.0 ones; only read)
  --work DIR         where the synthetic repository lives (default
                     $PREGRAD_CACHE/bench/checkout-scale)
  --baseline-rev REV also time the scripts/, patches/ and torch_backport/ of this project's
                     commit REV (e.g. the one before the single walk), in
                     the same run
Prints a table; exit 1 if a check fails.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
import torch_backport.patchset.series as model  # noqa: E402
from torch_backport.infra.git import git_blob_id  # noqa: E402
from torch_backport.patchset.identify import topic_files  # noqa: E402
from torch_backport.infra.fsio import cache_dir  # noqa: E402

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Release Engineer", "GIT_AUTHOR_EMAIL": "release@example.com",
    "GIT_COMMITTER_NAME": "Release Engineer", "GIT_COMMITTER_EMAIL": "release@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str, input: Optional[bytes] = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], input=input, check=True,
                          capture_output=True, env={**os.environ, **GIT_ENV}).stdout.decode()


def touched_files() -> List[str]:
    return sorted({rel for topic in model.topics()
                   for rel in topic_files(topic)})


def site_of(python: str) -> Path:
    out = subprocess.run([python, "-c", "import importlib.metadata as m;"
                          "print(m.distribution('torch').locate_file(''))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def revision(lines: List[bytes], number: int) -> bytes:
    """Version `number` of a real file: one synthetic line inserted at a
    place that moves, so consecutive versions differ by a small diff."""
    at = (number * 7919) % (len(lines) + 1)
    return b"".join(lines[:at] + [b"# synthetic revision %d\n" % number] + lines[at:])


def build(work: Path, real: Dict[str, bytes], commits: int, files: int,
          touching: int) -> None:
    """Write the repository with one `git fast-import` stream."""
    random.seed(2026)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    git(work, "init", "-q", "-b", "main")
    real_lines = {rel: data.splitlines(keepends=True) for rel, data in real.items()}
    others = [f"src/pkg{number // 200:03d}/module{number:05d}.py"
              for number in range(files - len(real))]
    touch_at = set(random.sample(range(2, commits - 2), touching))
    process = subprocess.Popen(["git", "-C", str(work), "fast-import", "--quiet"],
                               stdin=subprocess.PIPE, env={**os.environ, **GIT_ENV})
    assert process.stdin is not None
    out = process.stdin
    clock = 1_500_000_000

    def commit(mark: int, message: str, changes: List[Tuple[str, bytes]],
               branch: str = "refs/heads/main", parent: Optional[int] = None) -> None:
        text = message.encode()
        out.write(b"commit %s\nmark :%d\n" % (branch.encode(), mark))
        out.write(b"committer Release Engineer <release@example.com> %d +0000\n"
                  % (clock + mark))
        out.write(b"data %d\n%s\n" % (len(text), text))
        if parent is not None:
            out.write(b"from :%d\n" % parent)
        for rel, data in changes:
            out.write(b"M 100644 inline %s\ndata %d\n%s\n" % (rel.encode(), len(data), data))

    first = [(rel, b"# %s\n" % rel.encode() + b"value = 0\n" * 20) for rel in others]
    first += [(rel, revision(lines, 0)) for rel, lines in real_lines.items()]
    commit(1, "Initial import", first)
    names = sorted(real)
    for mark in range(2, commits - 1):
        if mark in touch_at:
            rel = names[mark % len(names)]
            commit(mark, f"[inductor] change {rel} ({mark})",
                   [(rel, revision(real_lines[rel], mark))])
        else:
            rel = others[mark % len(others)]
            commit(mark, f"change {rel} ({mark})",
                   [(rel, b"# %s\n" % rel.encode() + b"value = %d\n" % mark * 20)])
        if mark % 10_000 == 0:
            print(f"  {mark} of {commits} commits written", file=sys.stderr, flush=True)
    release = commits - 1
    commit(release, "Release 2.11.0", sorted(real.items()))
    out.write(b"reset refs/tags/v2.11.0\nfrom :%d\n\n" % release)
    commit(commits, "[release only] update a README", [(others[0], b"# release notes\n")],
           branch="refs/heads/release/2.11", parent=release)
    # main goes on: the files change again after the release.
    for extra in range(1, 51):
        rel = names[extra % len(names)]
        commit(commits + extra, f"[inductor] after the release ({extra})",
               [(rel, revision(real_lines[rel], commits + extra))],
               parent=release if extra == 1 else None)
    # A branch that stops just before the release: its files never held a
    # base's pristine blobs, so nothing stops the walk before the root.
    out.write(b"reset refs/heads/before-release\nfrom :%d\n\n" % (release - 1))
    out.close()
    if process.wait() != 0:
        raise SystemExit("git fast-import failed")
    git(work, "checkout", "-q", "-f", "release/2.11")
    git(work, "commit-graph", "write", "--reachable")


def shim_dir(log: Path) -> Path:
    """A directory with a `git` that logs each invocation, then runs git."""
    real_git = shutil.which("git")
    assert real_git
    directory = Path(tempfile.mkdtemp(prefix="pregrad-git-shim-"))
    (directory / "git").write_text(
        "#!/bin/sh\n"
        f"printf '%s\\n' \"$*\" >> '{log}'\n"
        f"exec '{real_git}' \"$@\"\n")
    (directory / "git").chmod(0o755)
    return directory


def timed(command: Sequence[str], cwd: Optional[Path] = None, shell: bool = False,
          counted: bool = True) -> Tuple[float, int, int, str]:
    """(seconds, exit code, git log processes, output) of one command."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "git.log"
        log.touch()
        shim = shim_dir(log)
        env = {**os.environ, **GIT_ENV}
        if counted:
            env["PATH"] = f"{shim}{os.pathsep}{env['PATH']}"
        started = time.perf_counter()
        result = subprocess.run(command if not shell else " ".join(command), shell=shell,
                                cwd=cwd, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        walks = sum(1 for line in log.read_text().splitlines()
                    if line.split(" ")[2:3] == ["log"] and " -p " in f" {line} ")
        shutil.rmtree(shim)
    return elapsed, result.returncode, walks, result.stdout + result.stderr


def bare_walk(work: Path, files: List[str]) -> float:
    quoted = " ".join(files)
    seconds, code, _, output = timed(
        [f"git -C '{work}' log -p HEAD -- {quoted} | git patch-id --stable > /dev/null"],
        shell=True, counted=False)
    assert code == 0, output
    return seconds


def tree_state(work: Path) -> str:
    return git(work, "rev-parse", "HEAD^{tree}").strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True)
    parser.add_argument("--commits", type=int, default=90_000)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--touching", type=int, default=4_000)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--baseline-rev")
    args = parser.parse_args()
    cache = cache_dir()
    work = args.work or cache / "bench" / "checkout-scale"
    files = touched_files()
    site = site_of(args.python)
    real = {rel: (site / rel).read_bytes() for rel in files}
    stamp = (f"{args.commits} {args.files} {args.touching} "
             + " ".join(git_blob_id(real[rel]) for rel in files))
    if not (work / ".git" / "pregrad-bench-stamp").is_file() or \
            (work / ".git" / "pregrad-bench-stamp").read_text() != stamp:
        print(f"building {args.commits} commits over {args.files} files in {work} "
              "(git fast-import; once) ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        build(work, real, args.commits, args.files, args.touching)
        (work / ".git" / "pregrad-bench-stamp").write_text(stamp)
        print(f"  built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    git(work, "checkout", "-q", "-f", "release/2.11")
    release_tip = git(work, "rev-parse", "release/2.11").strip()
    git(work, "reset", "-q", "--hard", release_tip)

    tools = {"this tree": REPO / "scripts" / "apply.sh"}
    baseline_dir = None
    if args.baseline_rev:
        baseline_dir = Path(tempfile.mkdtemp(prefix="pregrad-baseline-"))
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.baseline_rev,
                                  "scripts", "patches", "torch_backport"],
                                 capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(baseline_dir)], input=archive.stdout,
                       check=True)
        tools[f"at {args.baseline_rev}"] = baseline_dir / "scripts" / "apply.sh"

    walk = bare_walk(work, files)
    commit_count = git(work, "rev-list", "--count", "HEAD").strip()
    touching = git(work, "rev-list", "--count", "HEAD", "--", *files).strip()
    print(f"repository: {commit_count} commits on release/2.11, {touching} touching the "
          f"{len(files)} files the topics patch, "
          f"{len(git(work, 'ls-files').splitlines())} files")
    print(f"bare walk: git log -p HEAD -- <{len(files)} files> | git patch-id --stable: "
          f"{walk:.2f} s\n")
    scenarios = [
        ("release/2.11", "--check", ["--check"]),
        ("release/2.11", "apply", []),
        ("release/2.11", "--status", ["--status"]),
        ("release/2.11", "--revert", ["--revert"]),
        ("release/2.11", "--topic all", ["--topic", "all"]),
        ("release/2.11", "--status (both topics applied)", ["--status"]),
        ("release/2.11", "--revert --topic all", ["--revert", "--topic", "all"]),
        ("main", "--status (50 commits past the release)", ["--status"]),
        ("main", "--check (a 3-way merge)", ["--check"]),
        ("before-release", "--status (never a base: all history)", ["--status"]),
    ]
    failures: List[str] = []
    rows: List[List[str]] = []
    for label, apply in tools.items():
        git(work, "checkout", "-q", "-f", "release/2.11")
        git(work, "reset", "-q", "--hard", release_tip)
        start_tree = tree_state(work)
        for branch, name, extra in scenarios:
            current = git(work, "branch", "--show-current").strip()
            if branch != current:
                if current == "release/2.11" and tree_state(work) != start_tree:
                    failures.append(f"{label}: release/2.11 did not end at its tree")
                git(work, "checkout", "-q", "-f", branch)
            seconds, code, walks, output = timed([str(apply), str(work), *extra])
            if code != 0:
                failures.append(f"{label}: {name} exited {code}:\n{output}")
            if label == "this tree" and name.startswith("--status (both"):
                bases = [line for line in output.splitlines() if " base " in line]
                if (len(bases) != len(model.topics())
                        or not all("base v2.11.0" in line for line in bases)):
                    failures.append(f"--status does not name v2.11.0 for every topic:\n{output}")
            rows.append([label, f"{branch}: apply.sh CO {name}", f"{seconds:.2f}",
                         f"{seconds / walk:.2f}", str(walks)])
        git(work, "checkout", "-q", "-f", "release/2.11")
        git(work, "reset", "-q", "--hard", release_tip)
    if baseline_dir:
        shutil.rmtree(baseline_dir)
    headers = ["scripts", "command", "wall s", "÷ bare walk", "history walks (git log -p)"]
    widths = [max(len(row[i]) for row in rows + [headers]) for i in range(len(headers))]
    print(" | ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    git_version = subprocess.run(["git", "--version"], capture_output=True,
                                 text=True).stdout.strip()
    measured = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"\nmachine: {os.cpu_count()} cores, {os.uname().machine}, {git_version}, "
          f"load {os.getloadavg()[0]:.1f}; measured {measured}")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
