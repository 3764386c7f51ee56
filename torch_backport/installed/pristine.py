"""A base's pristine files, whatever the source, and a torch's files read
from another interpreter's install: the one way every mode and maintainer
tool gets them (--overlay, --wheel's checks, new-base, check-patches).

Sources, in the order a caller allows them: this interpreter's install
(a patched one gives its backups), the installs of other interpreters (a
stock test venv), then the release wheel (read by range, download/release_wheels.py).
Whatever the source, every file is checked against the base's
pristine.tsv, and the message names the source that failed."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from torch_backport.infra import record
from torch_backport.infra.errors import Refused
from torch_backport.infra.order import Order, Task
from torch_backport.infra.paths import PACKAGE, shown
from torch_backport.installed.install import find_install
from torch_backport.infra.git import git_blob_id
from torch_backport.patchset.identify import identify, Match, topic_files
from torch_backport.patchset.series import pristine_sha256, Series
from torch_backport.download.release_wheels import ReleaseFiles, release_files

LAUNCH = PACKAGE / "_launch.py"


class NotPristine(Refused):
    """A release's files are not those a base's pristine.tsv names."""


def probe(paths: Sequence[str]) -> Dict[str, Any]:
    """In the interpreter whose torch is read (the engine's READ_INSTALL_FILES
    order): its version, site and the RECORD digest of each of `paths`."""
    dist = metadata.distribution("torch")
    digests = record.of_dist(dist)
    return {"version": dist.version, "site": str(dist.locate_file("")),
            "record": {rel: digests.get(rel) for rel in paths}}


def install_files(python: str, paths: Sequence[str]) -> ReleaseFiles:
    """The files `paths` names of `python`'s torch, each as its RECORD says;
    Refused for a file that is not (patched or edited)."""
    order = Order(Task.READ_INSTALL_FILES, paths=tuple(paths)).to_json()
    asked = subprocess.run([python, str(LAUNCH), "engine", order], capture_output=True,
                           text=True)
    if asked.returncode != 0:
        detail = asked.stderr.strip().splitlines()[-1] if asked.stderr.strip() else "no output"
        raise Refused(f"{python}: could not read its torch's RECORD ({detail})")
    found = json.loads(asked.stdout)
    site = Path(found["site"])
    files = {rel: (site / rel).read_bytes() for rel, digest in found["record"].items()
             if digest is not None and (site / rel).is_file()}
    wrong = record.mismatches(files, found["record"])
    if wrong:
        raise Refused(f"{site / wrong[0]} differs from torch {found['version']}'s RECORD "
                      "(patched or edited): the release's own files are needed; use a stock "
                      "install, or read the release wheel")
    return ReleaseFiles(found["version"], files,
                        f"{python}'s torch {found['version']} ({site})")


def not_pristine(series: Series, files: Dict[str, bytes]) -> List[str]:
    wanted = pristine_sha256(series)
    return [rel for rel, digest in wanted.items()
            if rel not in files or record.sha256_hex(files[rel]) != digest]


def base_release(series: Series, cache: Path, pythons: Sequence[Optional[str]] = (),
                 version: Optional[str] = None) -> ReleaseFiles:
    """The pristine files of `series`' base, checked against its
    pristine.tsv, and where they came from: from the first of `pythons`
    whose torch holds them, else from the wheel of torch `version` (the
    base's own release if None)."""
    wanted = sorted(pristine_sha256(series))
    tried: List[str] = []
    for python in pythons:
        if python is None or not os.access(python, os.X_OK):
            continue
        try:
            found = install_files(python, wanted)
        except Refused as problem:
            tried.append(str(problem))
            continue
        if not not_pristine(series, found.files):
            return dataclasses.replace(found, files={rel: found.files[rel] for rel in wanted})
        tried.append(f"{python}: its files are not {series.base}'s pristine.tsv")
    found = release_files(version or series.version, wanted, cache)
    wrong = not_pristine(series, found.files)
    if wrong:
        also = "; also tried: " + "; ".join(tried) if tried else ""
        raise NotPristine(f"{found.source}: {wrong[0]} is not the file "
                          f"{shown(series.directory)}/pristine.tsv names{also}")
    return dataclasses.replace(found, files={rel: found.files[rel] for rel in wanted})


def base_files(series: Series, cache: Path, pythons: Sequence[Optional[str]] = (),
               version: Optional[str] = None) -> Dict[str, bytes]:
    """`base_release`'s files."""
    return base_release(series, cache, pythons, version).files


def this_install(series: Series) -> Dict[str, bytes]:
    """The files `series` touches as the wheel installed them: each from the
    install where it matches RECORD, else from this project's backup of it
    (a patched install); they must be `series`' base's."""
    install = find_install(series.topic)
    files: Dict[str, bytes] = {}
    for rel in series.touched:
        for source in (install.path(rel), install.backup(rel)):
            data = source.read_bytes() if source.is_file() and not source.is_symlink() else None
            if data is not None and record.digest(data) == install.record.get(rel):
                files[rel] = data
                break
        else:
            raise Refused(f"torch in {install.site}: {rel} is neither the wheel's nor backed "
                          "up by this project; need pristine or patched files")
    # Every file of the topic, not only this series': a release whose
    # files are another base's is named as that base.
    found = identify(series.topic, {**{rel: install.blob(rel) for rel in topic_files(series.topic)},
                                    **{rel: git_blob_id(data) for rel, data in files.items()}},
                     install.version)
    if found.series is None or found.how is not Match.PRISTINE or found.series.base != series.base:
        what = (f"the files of {found.series.base}" if found.series is not None
                and found.exact else "files that match no base")
        raise Refused(f"{sys.executable} has torch {install.version}, with {what}, "
                      f"not those of {series.base}")
    return files
