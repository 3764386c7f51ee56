"""The one place the package starts git: a runner whose configuration is
isolated (no system or global config, C locale, no prompts), the
throw-away index that tries patches without writing anything into the
repository (objects included), and the conflict report that names the hunk
and the conflicting lines. `git_blob_id` is git's id of some bytes, computed
here without git.

A user's checkout keeps its own repository config (.git/config) and its
committer identity, which `identity()` reads once with the user's
configuration and the runner then passes on; a scratch repository gets a
fixed identity and date, so what it makes is the same on every machine."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import signal
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Dict, IO, Iterable, Iterator, List, Optional, Tuple, Union

from torch_backport.infra.errors import Refused

ISOLATED = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C",
            "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat"}
SCRATCH_AUTHOR = ("torch-pregrad-backport new-base", "new-base@torch-pregrad-backport.invalid")
SCRATCH_DATE = "2026-01-01T00:00:00+00:00"
FAILED_HUNK_RE = re.compile(r"^error: patch failed: (\S+):(\d+)$", re.MULTILINE)
MAX_CONFLICT_LINES = 60


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[None]:
    """A Ctrl-C inside the block is raised as the block ends: Popen() raising
    it between fork and exec would leave git running, unreachable, in a
    directory about to be removed. The child still gets the default
    disposition at exec (a caught signal is reset there), unlike a blocked
    one, which it would inherit."""
    current = signal.getsignal(signal.SIGINT)
    if (threading.current_thread() is not threading.main_thread()
            or current == signal.SIG_IGN or current is None):
        # Only the main thread may set handlers (and only it gets SIGINT);
        # a Ctrl-C the caller ignores stays ignored, by git too; a handler
        # that C code set (None here) could not be put back.
        yield
        return
    caught: List[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        signal.raise_signal(signal.SIGINT)


def run_to_the_end(argv: List[str], text: bool = True, env: Optional[Dict[str, str]] = None,
                   input: Union[str, bytes, None] = None) -> "subprocess.CompletedProcess[Any]":
    """subprocess.run with its output captured, except that git has ended
    before a Ctrl-C (or any error) goes on. subprocess.run kills the child
    and returns without waiting, and Popen() interrupted between fork and
    exec does not even kill it: the scratch repository that git still
    writes in then cannot be removed (ENOTEMPTY), an error that would
    replace the Ctrl-C."""
    stdin = subprocess.PIPE if input is not None else None
    process: "Optional[subprocess.Popen[Any]]" = None
    try:
        with ctrl_c_deferred():
            process = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=text, env=env)
        stdout, stderr = process.communicate(input)
    except BaseException:
        if process is not None:
            process.kill()
            process.wait()
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
        raise
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@dataclasses.dataclass(frozen=True)
class Git:
    """git in one repository, with an environment of its own on top of ISOLATED."""
    repo: Path
    env: Tuple[Tuple[str, str], ...] = ()

    def environ(self, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        return {**os.environ, **ISOLATED, **dict(self.env), **(extra or {})}

    def with_env(self, **extra: str) -> "Git":
        return dataclasses.replace(self, env=tuple({**dict(self.env), **extra}.items()))

    def __call__(self, *args: str, check: bool = True, input: Union[str, bytes, None] = None,
                 binary: bool = False) -> "subprocess.CompletedProcess[Any]":
        result = run_to_the_end(["git", "-C", str(self.repo), *args], text=not binary,
                                env=self.environ(), input=input)
        if check and result.returncode != 0:
            error = result.stderr if not binary else result.stderr.decode(errors="replace")
            raise Refused(f"git {' '.join(args[:3])} failed in {self.repo}:\n{error.strip()}")
        return result

    def stream(self, *args: str, errors: IO[bytes]) -> "subprocess.Popen[bytes]":
        """git with its output as a pipe, for a history too long to hold."""
        return subprocess.Popen(["git", "-C", str(self.repo), *args], env=self.environ(),
                                stdout=subprocess.PIPE, stderr=errors)

    def ok(self, *args: str) -> bool:
        return self(*args, check=False).returncode == 0

    def git_path(self, name: str) -> Path:
        path = Path(self(*["rev-parse", "--git-path", name]).stdout.strip())
        return path if path.is_absolute() else self.repo / path


def identity(repo: Path) -> Optional[Dict[str, str]]:
    """The committer and author a user's checkout commits as, read with the
    user's own configuration; None if git has none."""
    found: Dict[str, str] = {}
    for who in ("AUTHOR", "COMMITTER"):
        result = run_to_the_end(["git", "-C", str(repo), "var", f"GIT_{who}_IDENT"])
        match = re.match(r"^(.*) <(.*)> \d+ [-+]\d{4}$", result.stdout.strip())
        if result.returncode != 0 or match is None:
            return None
        found[f"GIT_{who}_NAME"], found[f"GIT_{who}_EMAIL"] = match.group(1), match.group(2)
    return found


def trusted_directories() -> Dict[str, str]:
    """The user's `safe.directory` entries, passed on as command-line config
    (which git honours for it): isolation must not take back a repository
    owned by another account that the user chose to trust."""
    listed = run_to_the_end(["git", "config", "--get-all", "safe.directory"])
    entries = listed.stdout.splitlines() if listed.returncode == 0 else []
    passed = {"GIT_CONFIG_COUNT": str(len(entries))} if entries else {}
    for number, entry in enumerate(entries):
        passed[f"GIT_CONFIG_KEY_{number}"] = "safe.directory"
        passed[f"GIT_CONFIG_VALUE_{number}"] = entry
    return passed


def checkout(repo: Path) -> Git:
    """The runner for a user's checkout: isolated, committing as the user,
    trusting what the user's configuration trusts."""
    return Git(repo, tuple({**(identity(repo) or {}), **trusted_directories()}.items()))


def scratch(repo: Path) -> Git:
    """The runner for a repository this project makes (new-base's replay,
    applying a series in memory): a fixed identity and date."""
    name, email = SCRATCH_AUTHOR
    return Git(repo).with_env(GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email,
                              GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email,
                              GIT_AUTHOR_DATE=SCRATCH_DATE, GIT_COMMITTER_DATE=SCRATCH_DATE)


def init_scratch(repo: Path, branch: Optional[str] = None, for_people: bool = True) -> Git:
    """A new scratch repository at `repo` (its first branch `branch`). With
    `for_people`, its own config names the fixed identity: a person who
    finishes a `git am` there commits without a configuration of their own.
    Without it (a repository only this process uses, for `git apply`), the
    runner's isolated environment is all the configuration git reads: three
    git processes fewer on every apply."""
    repo.mkdir(parents=True, exist_ok=True)
    git = scratch(repo)
    git("init", "-q", *(["-b", branch] if branch else []))
    if not for_people:
        return git
    name, email = SCRATCH_AUTHOR
    for key, value in (("user.name", name), ("user.email", email), ("core.autocrlf", "false")):
        git("config", key, value)
    return git


def am_stopped_at(git: Git) -> int:
    """The number (from 1) of the patch a stopped `git am` is at."""
    next_file = git.git_path("rebase-apply") / "next"
    return int(next_file.read_text()) if next_file.is_file() else 1


@contextlib.contextmanager
def throwaway_index(git: Git) -> Iterator[Git]:
    """`git` with an index read from HEAD and an object directory that
    nothing else sees: what is tried there (`apply --cached`, `hash-object
    -w`) changes no ref, index, file or object of the repository. The
    repository's objects stay readable as an alternate."""
    objects = git.git_path("objects").resolve()
    with tempfile.TemporaryDirectory(prefix="pregrad-trial-") as tmp:
        (Path(tmp) / "objects").mkdir()
        trial = git.with_env(GIT_INDEX_FILE=str(Path(tmp) / "index"),
                             GIT_OBJECT_DIRECTORY=str(Path(tmp) / "objects"),
                             GIT_ALTERNATE_OBJECT_DIRECTORIES=str(objects))
        trial("read-tree", "HEAD")
        yield trial


def write_blobs(git: Git, contents: Iterable[bytes]) -> None:
    """Write each of `contents` as a blob into the object directory `git`
    writes to (a throw-away index's own, or the repository's), in one git
    process. Unreachable blobs change no ref, index or file."""
    wanted = {git_blob_id(data): data for data in contents}
    listed = git("cat-file", "--batch-check", input="".join(f"{blob}\n" for blob in wanted))
    # A blob the repository has is left alone: not even its pack's mtime moves.
    present = {line.split()[0] for line in listed.stdout.splitlines()
               if not line.endswith(" missing")}
    with tempfile.TemporaryDirectory(prefix="pregrad-blobs-") as tmp:
        paths = []
        for number, data in enumerate(data for blob, data in wanted.items()
                                      if blob not in present):
            path = Path(tmp) / str(number)
            path.write_bytes(data)
            paths.append(str(path))
        if paths:
            git("hash-object", "-w", "--stdin-paths", input="\n".join(paths) + "\n")


def unapplied_hunks(git: Git, patch: Path) -> List[Tuple[str, int]]:
    """(path, pre-image line) of each hunk of `patch` that does not apply
    to the index `git` uses as it is (a throw-away index, already)."""
    check = git("apply", "--cached", "--check", "--verbose", str(patch), check=False)
    return [(rel, int(line)) for rel, line in FAILED_HUNK_RE.findall(check.stderr)]


def failed_hunks(git: Git, patch: Path) -> List[Tuple[str, int]]:
    """(path, pre-image line) of each hunk of `patch` that does not apply
    to HEAD as it is, tried in a throw-away index."""
    with throwaway_index(git) as trial:
        return unapplied_hunks(trial, patch)


def hunk_header(patch_text: str, rel: str, line: int) -> str:
    """The `@@ -line,... @@` header of `rel`'s hunk starting at `line`."""
    start = patch_text.find(f"diff --git a/{rel} b/{rel}")
    section = patch_text[start:] if start >= 0 else ""
    end = section.find("\ndiff --git ", 1)
    section = section if end < 0 else section[:end]
    header = re.search(rf"^@@ -{line}(?:,\d+)? \+\d+(?:,\d+)? @@.*$", section, re.MULTILINE)
    return header.group(0) if header else f"at line {line}"


def conflict_report(git: Git, patch: Path, what: str) -> List[str]:
    """Where a patch stopped (`git am -3` or `apply --3way` in the work
    tree): the hunks that do not apply to `what`'s file, then the
    conflicting lines of each unmerged file (at most MAX_CONFLICT_LINES)."""
    text = patch.read_text()
    lines = [f"  {rel}: hunk {hunk_header(text, rel, line)} does not apply to {what}'s file"
             for rel, line in failed_hunks(git, patch)]
    budget = MAX_CONFLICT_LINES
    for rel, regions in conflict_regions(git).items():
        content = (git.repo / rel).read_text(errors="replace").splitlines()
        lines.append(f"  conflicting lines in {rel} ({len(regions)} region(s)):")
        for start, end in regions:
            lines.append(f"    lines {start}-{end}:")
            shown = content[start - 1:end][:max(budget, 0)]
            lines += [f"    {start + i:>6}  {line}" for i, line in enumerate(shown)]
            budget -= len(shown)
            if budget <= 0:
                lines.append("    ... (the rest is in the file)")
                return lines
    if len(lines) == 0:
        lines.append("  git am stopped without a conflicted file; see "
                     "`git am --show-current-patch`")
    return lines


def unmerged(git: Git) -> List[str]:
    """The work tree's files that a merge left conflicted."""
    return list(git("diff", "--name-only", "--diff-filter=U").stdout.split())


def conflict_regions(git: Git) -> Dict[str, List[Tuple[int, int]]]:
    """Each unmerged file -> the (first, last) line, counted from 1, of each
    region between conflict markers (none for a file git cannot read as text)."""
    regions: Dict[str, List[Tuple[int, int]]] = {}
    for rel in unmerged(git):
        try:
            content = (git.repo / rel).read_text(errors="replace").splitlines()
        except OSError:
            regions[rel] = []
            continue
        starts = [i for i, line in enumerate(content) if line.startswith("<<<<<<<")]
        regions[rel] = [(start + 1, next((i for i in range(start, len(content))
                                          if content[i].startswith(">>>>>>>")),
                                         len(content) - 1) + 1)
                        for start in starts]
    return regions


def conflict_places(git: Git) -> List[str]:
    """'path:line' of each conflict region in the work tree (the path alone
    for an unmerged file without markers)."""
    return [place for rel, regions in conflict_regions(git).items()
            for place in ([f"{rel}:{start}" for start, _ in regions] or [rel])]


def write_tree(git: Git, files: Dict[str, bytes]) -> None:
    """Write `files` into the work tree of a scratch repository."""
    for rel, data in files.items():
        (git.repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (git.repo / rel).write_bytes(data)


def commit_all(git: Git, message: str) -> str:
    git("add", "-A")
    git("commit", "-q", "--allow-empty", "-m", message)
    return str(git("rev-parse", "HEAD").stdout.strip())


def git_blob_id(data: bytes) -> str:
    """The id git gives `data` as a blob (what `git hash-object` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
