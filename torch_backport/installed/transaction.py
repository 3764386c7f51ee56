"""Every write to an install, as one transaction per run: stage, rename into
place, roll back.

An apply first stages the state directory (<state>.staging: the backups,
hard links to the wheel's files where it can; the manifest as it is while
applying and once applied) and each patched file's fsynced temporary copy
beside it, then renames the staging directory into place. From there on
it only renames: each patched file over its original, then the applied
manifest over the applying one. A failure at any point puts every file
back from the backups, by rename too (no space needed), and drops the
state directory. A revert marks the manifest "reverting", renames the
backups into place, then drops the state directory. A state directory is
removed by one rename to <state>.trash and then deleted, so a killed run
leaves a staging or trash directory or temporary copies (which the next
run removes: `remove_leftovers`), never a state directory without its
manifest; one that stopped part-way is rolled back by `recover`.

Every write, rename and removal takes a fault step (fsio.fault_point) first: the
fault tests stop a run at each of them, so their number and order are
part of the contract."""

from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path
from typing import Dict, List

from torch_backport.infra import record
from torch_backport.patchset.driver import Say
from torch_backport.infra.errors import Refused
from torch_backport.infra.fsio import (atomic_write, fault_point, free_kb, leftover_temps,
                                       link_or_copy, link_temp, make_dirs, own_like, read_regular,
                                       refuse_link, refuse_links_below, write_new, write_temp)
from torch_backport.patchset.identify import topic_files
from torch_backport.installed.install import (APPLIED, BACKUPS, Install, MANIFEST,
                                              pycache_is_a_directory, pycache_of,
                                              read_manifest, refresh_bytecode,
                                              refuse_untrusted_state)
from torch_backport.installed.records import Manifest
from torch_backport.installed.state import reinstall_command, State, Status
from torch_backport.patchset.series import Series
from torch_backport.installed.status import inspect


# What a killed run leaves, and the state directory's removal.

def refuse_links(install: Install, paths: List[str]) -> None:
    """Before anything is written: no state, staging or trash directory, no
    file to patch, no directory on the way to one and no __pycache__ beside
    one may be a symbolic link (another user may have planted it where root
    will write), and a __pycache__ must be a directory."""
    for directory in (install.state_dir, install.leftover("staging"), install.leftover("trash")):
        refuse_link(directory, "directory")
    for rel in paths:
        refuse_links_below(install.site, install.path(rel))
        pycache = pycache_of(install.path(rel))
        refuse_link(pycache, "directory")
        if pycache.exists() and not pycache_is_a_directory(install.path(rel)):
            raise Refused(f"{pycache} is not a directory (the bytecode of {rel} goes there); "
                          "refused, nothing was written. Remove it")


def remove_partial_writes(install: Install, paths: List[str]) -> None:
    """Temporary files that a killed atomic_write left beside its target
    (unlinked, never followed)."""
    for rel in paths:
        for tmp in leftover_temps(install.path(rel)):
            fault_point(tmp)
            tmp.unlink()


def remove_leftovers(install: Install) -> None:
    """What only a killed run leaves: a staging dir that was never renamed
    into place, a trash dir that was not deleted, and the temporary copies
    of the topic's files that were written before the staging dir was."""
    for leftover in (install.leftover("staging"), install.leftover("trash")):
        if leftover.exists():
            fault_point(leftover)
            shutil.rmtree(leftover)
    if not install.state_dir.exists():
        remove_partial_writes(install, topic_files(install.topic))


def drop_state(install: Install) -> None:
    """Remove the state dir in one rename, then delete it: a run killed in
    between leaves a trash dir that the next run removes, never a state dir
    without its manifest."""
    trash = install.leftover("trash")
    remove_leftovers(install)
    fault_point(install.state_dir)
    os.replace(install.state_dir, trash)
    fault_point(trash)
    shutil.rmtree(trash)


# Apply: stage, then rename into place.

def stage(install: Install, series: Series, pristine: Dict[str, bytes],
          patched: Dict[str, bytes], staging: Path) -> Dict[str, Path]:
    """The staging dir, made here and now (not one found), and each patched
    file's temporary copy: rel -> its path."""
    make_dirs(staging, staging.parent, install.state_mode)
    for rel, data in pristine.items():
        source = install.path(rel)
        make_dirs((staging / BACKUPS / rel).parent, staging, install.state_mode)
        if source.is_file() and not source.is_symlink() and read_regular(source) == data:
            link_or_copy(source, staging / BACKUPS / rel)
        else:  # an earlier series' backup: the installed file is not the wheel's
            write_new(staging / BACKUPS / rel, data)
    manifest = Manifest(
        state="applying",
        torch=install.version,
        base=series.base,
        series={p.name: record.sha256_hex(p.read_bytes()) for p in series.patches},
        pristine={rel: install.record[rel] for rel in series.touched},
        patched={rel: record.digest(data) for rel, data in patched.items()},
        modes={rel: install.path(rel).stat().st_mode & 0o7777 for rel in series.touched},
    )
    write_new(staging / MANIFEST, manifest.to_json())
    write_new(staging / APPLIED, manifest.with_state("applied").to_json())
    for made in [staging, *staging.rglob("*")]:
        own_like(made, install.site)
    return {rel: write_temp(install.path(rel), patched[rel],
                            install.path(rel).stat().st_mode & 0o7777)
            for rel in series.touched}


def write_backups(install: Install, series: Series,
                  pristine: Dict[str, bytes], patched: Dict[str, bytes]) -> Dict[str, Path]:
    """Everything an apply needs on disk before it replaces a file: the
    backups (hard links to the installed files where those are the wheel's:
    no space), the manifest as it is while applying and once applied, and
    each patched file's fsynced temporary copy beside it. The state dir is
    staged and renamed into place: complete or absent. A failure here (a
    full disk) removes what it wrote; the install is as it was."""
    staging = install.leftover("staging")
    try:
        temps = stage(install, series, pristine, patched, staging)
        fault_point(install.state_dir)
        os.replace(staging, install.state_dir)
        return temps
    except BaseException as problem:
        shutil.rmtree(staging, ignore_errors=True)
        remove_partial_writes(install, series.touched)
        if isinstance(problem, OSError) and problem.errno == errno.ENOSPC:
            need = (sum(map(len, patched.values())) + 4096) // 1024 + 1
            raise OSError(errno.ENOSPC, f"No space left on device: this apply needs about "
                          f"{need} KB free in {install.site} ({free_kb(install.site)} KB "
                          "are); nothing was changed", problem.filename) from None
        raise


def write_series(status: Status, pristine: Dict[str, bytes], patched: Dict[str, bytes],
                 say: Say) -> None:
    """Keep the originals, then write the patched files, as one transaction:
    a failure part-way restores every file to the wheel's bytes."""
    install, series = status.install, status.series
    assert series is not None
    refuse_links(install, series.touched)
    if status.state is State.OUTDATED:
        assert status.manifest is not None
        restore_pristine(install, status.manifest)
        drop_state(install)
        say("an earlier version of the series was applied: restored the wheel's "
            "files, now applying this one")
    elif status.manifest is not None:
        drop_state(install)  # left by an earlier install of torch that was replaced
    remove_leftovers(install)
    remove_partial_writes(install, series.touched)
    temps = write_backups(install, series, pristine, patched)
    # Only renames from here: a full disk cannot stop them part-way, and the
    # rollback below puts the backups back by rename too.
    try:
        for rel in series.touched:
            fault_point(install.path(rel))
            os.replace(temps[rel], install.path(rel))
            refresh_bytecode(install, rel)
            say(f"  patched {rel}")
        fault_point(install.manifest_path)
        os.replace(install.state_dir / APPLIED, install.manifest_path)
    except BaseException:
        manifest = read_manifest(install)
        assert manifest is not None
        restore_pristine(install, manifest)
        remove_partial_writes(install, series.touched)
        drop_state(install)
        print("failed part-way: every file was restored to the wheel's bytes",
              file=sys.stderr)
        raise
    say(f"applied {len(series.patches)} patches to {len(series.touched)} files; "
        f"originals kept in {install.state_dir}")


def patch_again(install: Install, todo: List[str], patched: Dict[str, bytes],
                say: Say) -> None:
    """Patch again the files of a partly reverted install that were reverted by hand."""
    refuse_links(install, todo)
    for rel in todo:
        atomic_write(install.path(rel), patched[rel], install.path(rel).stat().st_mode & 0o7777)
        refresh_bytecode(install, rel)
        say(f"  patched {rel} again")
    say(f"applied: {len(todo)} file(s) that were reverted by hand are patched again")


# Roll back: the backups renamed into place.

def restore_pristine(install: Install, manifest: Manifest) -> List[str]:
    """Put every file the manifest names back to the wheel's bytes, from the backups."""
    restored: List[str] = []
    backups = install.state_dir / BACKUPS
    refuse_links(install, sorted(manifest.pristine))  # an earlier series' files too
    refuse_untrusted_state(install)
    for rel in sorted(manifest.pristine):
        target = install.path(rel)
        if (target.is_file() and not target.is_symlink()
                and record.digest(read_regular(target)) == install.record[rel]):
            continue
        backup = backups / rel
        data = read_regular(backup) if backup.is_file() else b""
        if record.digest(data) != install.record[rel]:
            raise Refused(
                f"the backup of {rel} in {backups} does not match torch's RECORD; "
                f"reinstall torch ({reinstall_command(install)})"
            )
        # The backup's own file, by link and rename: no space needed, so a
        # full disk cannot stop a rollback.
        tmp = link_temp(backup, target, manifest.modes.get(rel, 0o644))
        fault_point(target)
        os.replace(tmp, target)
        refresh_bytecode(install, rel)
        restored.append(rel)
    return restored


def restore_without_manifest(install: Install, series: Series) -> List[str]:
    """A state dir whose manifest is gone: put back each touched file that is
    not the wheel's from a backup that matches RECORD, or refuse."""
    manifest = Manifest("missing", pristine={rel: install.record[rel]
                                             for rel in series.touched})
    return restore_pristine(install, manifest)


def recover(status: Status, say: Say) -> None:
    """Finish or roll back the run that `status` found interrupted."""
    assert status.series is not None
    refuse_links(status.install, status.series.touched)
    what = status.manifest.state if status.manifest else "earlier"
    if status.manifest is not None and status.manifest.pristine:
        restored = restore_pristine(status.install, status.manifest)
    else:
        restored = restore_without_manifest(status.install, status.series)
    remove_partial_writes(status.install, status.series.touched)
    drop_state(status.install)
    done = ("finished an interrupted revert" if what == "reverting"
            else f"rolled back an interrupted {what} run")
    say(f"{done}: restored {len(restored)} file(s) to the wheel's bytes")


def restore_series(status: Status, say: Say) -> None:
    """--revert of an applied series: mark the manifest, put the backups
    back, drop the state dir, and check that the files are the wheel's."""
    install = status.install
    assert status.series is not None and status.manifest is not None
    refuse_links(install, status.series.touched)
    manifest = status.manifest.with_state("reverting")
    atomic_write(install.manifest_path, manifest.to_json(), 0o644)
    restored = restore_pristine(install, manifest)
    for rel in restored:
        say(f"  restored {rel}")
    drop_state(install)
    after = inspect(install)
    if after.state is not State.PRISTINE:
        raise Refused("after the revert the files still differ from RECORD:\n"
                      + "\n".join(after.lines))
    say(f"reverted: {len(restored)} file(s) are byte-identical to torch's RECORD again")
