"""Checkout-shaped git repositories for testing `scripts/apply.sh CHECKOUT`.

Built offline from a real torch install's files at their upstream paths
(`torch/...`), with a history like a release branch: a base commit tagged
v2.11.0, then unrelated commits on top.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fake_install import APPLY, AUTOCAST, ISA_PROBE, torch_site, TOUCHED

# Other files of a checkout, so the tree is not only what the series touches.
EXTRA = ["torch/__init__.py", "torch/_inductor/utils.py", ISA_PROBE, AUTOCAST]
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Release Engineer",
    "GIT_AUTHOR_EMAIL": "release@example.com",
    "GIT_COMMITTER_NAME": "Release Engineer",
    "GIT_COMMITTER_EMAIL": "release@example.com",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


@dataclass
class Checkout:
    path: Path

    def git(self, *args: str, check: bool = True) -> str:
        return subprocess.run(
            ["git", "-C", str(self.path), *args],
            capture_output=True,
            text=True,
            check=check,
            env={**os.environ, **GIT_ENV},
        ).stdout

    def commit_file(self, rel: str, data: bytes, message: str) -> str:
        (self.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (self.path / rel).write_bytes(data)
        self.git("add", rel)
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD").strip()

    def read(self, rel: str) -> bytes:
        return (self.path / rel).read_bytes()

    def state(self) -> dict[str, object]:
        """Everything a refused run must leave as it was: HEAD, refs, the index
        entries (mode, blob, stage of every path; not the file's stat cache),
        the work tree's bytes and git's in-progress markers."""
        git_dir = self.path / ".git"
        tree = {
            str(p.relative_to(self.path)): p.read_bytes()
            for p in sorted(self.path.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(self.path).parts
        }
        return {
            "head": self.git("rev-parse", "HEAD").strip(),
            "orig_head": self.git("rev-parse", "-q", "--verify", "ORIG_HEAD", check=False),
            "refs": self.git("for-each-ref", "--format=%(refname) %(objectname)"),
            "index": self.git("ls-files", "--stage"),
            "tree": tree,
            "in_progress": sorted(
                name
                for name in ("rebase-apply", "rebase-merge", "MERGE_HEAD", "REVERT_HEAD")
                if (git_dir / name).exists()
            ),
        }

    def run(self, *args: str, apply: Path = APPLY) -> tuple[int, str]:
        result = subprocess.run(
            [str(apply), str(self.path), *args],
            capture_output=True,
            text=True,
            env={**os.environ, **GIT_ENV},
        )
        return result.returncode, (result.stdout + result.stderr).replace(
            str(self.path), "<checkout>"
        )


def make_checkout(path: Path, site: Path, files: list[str] | None = None) -> Checkout:
    """A repository at the v2.11.0 base (the files of the install at `site`),
    tagged, with two unrelated commits on top."""
    path.mkdir(parents=True)
    checkout = Checkout(path)
    checkout.git("init", "-q", "-b", "release/2.11")
    for rel in files or TOUCHED + EXTRA:
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes((site / rel).read_bytes())
    checkout.git("add", "-A")
    checkout.git("commit", "-q", "-m", "v2.11.0")
    checkout.git("tag", "v2.11.0")
    checkout.commit_file("RELEASE_NOTES.md", b"# 2.11.x\n", "Add release notes")
    utils = (checkout.read("torch/_inductor/utils.py")
             if (path / "torch/_inductor/utils.py").exists() else b"")
    checkout.commit_file(
        "torch/_inductor/utils.py", utils + b"\n# cherry-pick: unrelated fix\n",
        "[release/2.11] unrelated inductor fix",
    )
    return checkout


site_of = torch_site  # the name the checkout tests use
