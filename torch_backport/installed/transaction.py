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

import contextlib
import errno
import os
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from torch_backport.infra import record
from torch_backport.patchset.driver import Say
from torch_backport.infra.errors import Refused
from torch_backport.infra.dirfd import Dir, parent_and_name
from torch_backport.infra.fsio import (fault_point, free_kb, owner_of, refuse_link,
                                       refuse_links_below)
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
    with Dir.open(install.site) as site:
        for rel in paths:
            try:
                parent, name = parent_and_name(site, rel)
            except FileNotFoundError:
                continue
            with parent:
                for tmp in list(parent.leftover_temps(name)):
                    parent.unlink(tmp)


def remove_leftovers(install: Install) -> None:
    """What only a killed run leaves: a staging dir that was never renamed
    into place, a trash dir that was not deleted, and the temporary copies
    of the topic's files that were written before the staging dir was."""
    with Dir.open(install.site) as site:
        for kind in ("staging", "trash"):
            site.remove_tree_if_there(install.leftover(kind).name)
        state_there = site.lstat(install.state_dir.name) is not None
    if not state_there:
        remove_partial_writes(install, topic_files(install.topic))


def drop_state(install: Install) -> None:
    """Remove the state dir in one rename, then delete it: a run killed in
    between leaves a trash dir that the next run removes, never a state dir
    without its manifest."""
    trash = install.leftover("trash").name
    remove_leftovers(install)
    with Dir.open(install.site) as site:
        site.replace(install.state_dir.name, trash)
        site.remove_tree(trash)


# Apply: stage, then rename into place.

def keep_original(site: Dir, backups: Dir, rel: str, data: bytes, mode: int,
                  owner: Optional[Tuple[int, int]]) -> None:
    """The backup of `rel`: a hard link to the installed file where that is
    the wheel's (no space), else the wheel's bytes in a new file."""
    parent, name = parent_and_name(site, rel)
    with parent, backups.walk(Path(rel).parts[:-1], mode, owner) as into:
        fault_point(into.path / name)
        if parent.is_regular(name):
            installed, found = parent.read(name)
            if installed == data:
                try:
                    os.link(name, name, src_dir_fd=parent.fd, dst_dir_fd=into.fd,
                            follow_symlinks=False)
                    return
                except FileExistsError:
                    raise
                except OSError:  # another file system: a copy
                    into.new_file(name, data, found.st_mode & 0o7777, owner_of(found))
                    return
        # An earlier series' backup: the installed file is not the wheel's.
        into.new_file(name, data, 0o644, owner)


def stage(install: Install, series: Series, pristine: Dict[str, bytes],
          patched: Dict[str, bytes], staging: Path) -> Dict[str, str]:
    """The staging dir, made here and now (not one found), and each patched
    file's temporary copy beside it: rel -> its temporary name."""
    mode, owner = install.state_mode, owner_of(install.site.stat())
    with Dir.open(install.site) as site:
        site.mkdir(staging.name, mode, owner)
        modes: Dict[str, int] = {}
        with site.sub(staging.name) as staged:
            staged.mkdir(BACKUPS, mode, owner)
            with staged.sub(BACKUPS) as backups:
                for rel, data in pristine.items():
                    keep_original(site, backups, rel, data, mode, owner)
            for rel in series.touched:
                parent, name = parent_and_name(site, rel)
                with parent:
                    found = parent.lstat(name)
                    assert found is not None, rel
                    modes[rel] = found.st_mode & 0o7777
            manifest = Manifest(
                state="applying",
                torch=install.version,
                base=series.base,
                series={p.name: record.sha256_hex(p.read_bytes()) for p in series.patches},
                pristine={rel: install.record[rel] for rel in series.touched},
                patched={rel: record.digest(data) for rel, data in patched.items()},
                modes=modes,
            )
            for name, written in ((MANIFEST, manifest), (APPLIED, manifest.with_state("applied"))):
                fault_point(staged.path / name)
                staged.new_file(name, written.to_json(), 0o644, owner)
        temps = {}
        for rel in series.touched:
            parent, name = parent_and_name(site, rel)
            with parent:
                found = parent.lstat(name)
                assert found is not None, rel
                temps[rel] = parent.write_temp(name, patched[rel], modes[rel], owner_of(found))
        return temps


def write_backups(install: Install, series: Series,
                  pristine: Dict[str, bytes], patched: Dict[str, bytes]) -> Dict[str, str]:
    """Everything an apply needs on disk before it replaces a file: the
    backups (hard links to the installed files where those are the wheel's:
    no space), the manifest as it is while applying and once applied, and
    each patched file's fsynced temporary copy beside it. The state dir is
    staged and renamed into place: complete or absent. A failure here (a
    full disk) removes what it wrote; the install is as it was."""
    staging = install.leftover("staging")
    try:
        temps = stage(install, series, pristine, patched, staging)
        with Dir.open(install.site) as site:
            site.replace(staging.name, install.state_dir.name)
        return temps
    except BaseException as problem:
        with Dir.open(install.site) as site:
            try:
                site.remove_tree_if_there(staging.name)
            except OSError:
                pass
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
        with Dir.open(install.site) as site:
            for rel in series.touched:
                parent, name = parent_and_name(site, rel)
                with parent:
                    parent.replace(temps[rel], name)
                    refresh_bytecode(install, rel, parent, name)
                say(f"  patched {rel}")
            with site.sub(install.state_dir.name) as state:
                state.replace(APPLIED, MANIFEST)
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
    with Dir.open(install.site) as site:
        for rel in todo:
            parent, name = parent_and_name(site, rel)
            with parent:
                found = parent.lstat(name)
                assert found is not None, rel
                parent.atomic_write(name, patched[rel], found.st_mode & 0o7777, owner_of(found))
                refresh_bytecode(install, rel, parent, name)
            say(f"  patched {rel} again")
    say(f"applied: {len(todo)} file(s) that were reverted by hand are patched again")


# Roll back: the backups renamed into place.

def backup_of(backups: Optional[Dir], rel: str) -> Optional[Tuple[Dir, str]]:
    """The open directory of `rel`'s backup and its name; None if missing."""
    if backups is None:
        return None
    try:
        parent, name = parent_and_name(backups, rel)
    except FileNotFoundError:
        return None
    if not parent.is_regular(name):
        parent.close()
        return None
    return parent, name


def restore_pristine(install: Install, manifest: Manifest) -> List[str]:
    """Put every file the manifest names back to the wheel's bytes, from the backups."""
    restored: List[str] = []
    backups_path = install.state_dir / BACKUPS
    refuse_links(install, sorted(manifest.pristine))  # an earlier series' files too
    refuse_untrusted_state(install)
    with contextlib.ExitStack() as opened:
        site = opened.enter_context(Dir.open(install.site))
        try:
            state = opened.enter_context(site.sub(install.state_dir.name))
            backups: Optional[Dir] = opened.enter_context(state.sub(BACKUPS))
        except FileNotFoundError:
            backups = None
        for rel in sorted(manifest.pristine):
            parent, name = parent_and_name(site, rel)
            with parent:
                if (parent.is_regular(name)
                        and record.digest(parent.read(name)[0]) == install.record[rel]):
                    continue
                kept = backup_of(backups, rel)
                data = b"" if kept is None else kept[0].read(kept[1])[0]
                if record.digest(data) != install.record[rel]:
                    raise Refused(
                        f"the backup of {rel} in {backups_path} does not match torch's RECORD; "
                        f"reinstall torch ({reinstall_command(install)})"
                    )
                assert kept is not None
                with kept[0]:
                    # The backup's own file, by link and rename: no space needed,
                    # so a full disk cannot stop a rollback.
                    tmp = parent.link_temp(kept[0], kept[1], name, manifest.modes.get(rel, 0o644))
                parent.replace(tmp, name)
                refresh_bytecode(install, rel, parent, name)
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
    with Dir.open(install.site) as site, site.sub(install.state_dir.name) as state:
        found = state.lstat(MANIFEST)
        state.atomic_write(MANIFEST, manifest.to_json(), 0o644,
                           owner_of(found) if found is not None else None)
    restored = restore_pristine(install, manifest)
    for rel in restored:
        say(f"  restored {rel}")
    drop_state(install)
    after = inspect(install)
    if after.state is not State.PRISTINE:
        raise Refused("after the revert the files still differ from RECORD:\n"
                      + "\n".join(after.lines))
    say(f"reverted: {len(restored)} file(s) are byte-identical to torch's RECORD again")
