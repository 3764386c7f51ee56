"""Finding where an installed torch stands for one topic (`inspect`, a
`install_state.Status`) from its files, its RECORD and this project's
manifest, and --status, which prints it. Reads only; never imports torch."""

from __future__ import annotations

import sys
from typing import Dict, List, Optional, Tuple

from torch_backport.infra import record
from torch_backport.infra.errors import Refused
from torch_backport.infra.git import git_blob_id
from torch_backport.patchset.identify import Identified, identify, topic_files
from torch_backport.installed.install import Install, read_manifest, stale_bytecode
from torch_backport.installed.records import BuiltTopic, Manifest
from torch_backport.installed.state import FileKind, State, Status
from torch_backport.patchset.releases import known_defect
from torch_backport.patchset.series import final_blobs, load_series, Series, supported_bases
from torch_backport.infra.exit_codes import Exit


def file_kind(install: Install, rel: str, patched_digest: Optional[str],
              patched_blob: Optional[str]) -> FileKind:
    path = install.path(rel)
    if path.is_symlink():
        return FileKind.SYMLINK
    if not path.is_file():
        return FileKind.MISSING
    data = install.read(rel)
    if record.digest(data) == install.record.get(rel):
        return FileKind.PRISTINE
    if patched_digest is not None and record.digest(data) == patched_digest:
        return FileKind.PATCHED
    if patched_blob is not None and git_blob_id(data) == patched_blob:
        return FileKind.PATCHED
    return FileKind.MODIFIED


def choose_series(install: Install, manifest: Optional[Manifest]
                  ) -> tuple[Optional[Series], Optional[Identified]]:
    """The series for this install: the one its manifest names, if this
    torch was patched here; else the base whose files it holds byte for byte
    (pristine, or as its series makes them); else the closest base."""
    recorded = manifest.base if manifest else None
    if (manifest is not None and recorded is not None
            and recorded in supported_bases(install.topic) and manifest.torch == install.version):
        return load_series(recorded, install.topic), None
    found = identify(install.topic,
                     {rel: install.blob(rel) for rel in topic_files(install.topic)},
                     install.version)
    return found.series, found


def inspect_built(install: Install, built: BuiltTopic) -> Status:
    """A topic that the patched wheel this torch came from carries: its
    files are the series', and RECORD says so."""
    base = built.base
    series = (load_series(base, install.topic) if base in supported_bases(install.topic)
              else None)
    kinds = {rel: FileKind.PATCHED if install.matches_record(rel)
             and record.sha256_hex(install.read(rel)) == digest else FileKind.MODIFIED
             for rel, digest in built.files.items()}
    state = (State.PATCHED_WHEEL if set(kinds.values()) == {FileKind.PATCHED}
             else State.MODIFIED)
    return Status(state, install, series, kinds, None)


def inspect(install: Install) -> Status:
    """Where the install stands for its topic, and with which series."""
    built = install.built_topic()
    if built is not None:
        return inspect_built(install, built)
    manifest = read_manifest(install)
    series, identified = choose_series(install, manifest)
    if series is None or (identified is not None and not identified.exact and all(
            install.matches_record(rel) for rel in identified.differing)):
        # No series, or the wheel's own files but no base's: a release
        # without a series.
        state = State.HAS_FEATURE if install.has_feature() else State.UNSUPPORTED
        if state is State.HAS_FEATURE and known_defect(install.topic, install.version):
            state = State.UNSEEN
        return Status(state, install, None, {}, manifest, identified)
    for rel in series.touched:
        if rel not in install.record:
            raise Refused(f"{rel} is not in torch {install.version}'s RECORD")
    linked = linked_files(install, series)
    if linked and manifest is None:
        return Status(State.LINKED, install, series, {rel: FileKind.LINK for rel in linked},
                      None, identified)
    state, kinds, note = series_state(install, series, manifest)
    return Status(state, install, series, kinds,
                  None if state is State.NO_BACKUPS else manifest, identified, note)


def series_state(install: Install, series: Series, manifest: Optional[Manifest]
                 ) -> Tuple[State, Dict[str, FileKind], Optional[str]]:
    """The state of an install whose series is known, each file's kind, and
    a note said before them."""
    if manifest is None and install.state_dir.exists():
        # A state directory without its manifest: a run was killed while
        # writing or removing it.
        return (State.INTERRUPTED, {},
                f"{install.state_dir} has no manifest.json (a run was killed part-way)")
    if manifest is not None and manifest.state != "applied":
        return State.INTERRUPTED, {}, f"{manifest.state} run stopped part-way"
    pristine, patched = {FileKind.PRISTINE}, {FileKind.PATCHED}
    if manifest is not None:
        kinds = {rel: file_kind(install, rel, digest, None)
                 for rel, digest in manifest.patched.items()}
        seen = set(kinds.values())
        current = {p.name: record.sha256_hex(p.read_bytes()) for p in series.patches}
        same_series = (manifest.series == current
                       and sorted(manifest.patched) == series.touched)
        if seen == patched:
            return (State.PATCHED if same_series else State.OUTDATED), kinds, None
        if seen == pristine | patched and same_series:
            return State.PARTIAL, kinds, None
        if seen != pristine:
            return State.MODIFIED, kinds, None
        # All pristine again: the state is stale (torch was reinstalled).
    blobs = final_blobs(series)
    kinds = {rel: file_kind(install, rel, None, blobs.get(rel)) for rel in series.touched}
    seen = set(kinds.values())
    if seen == pristine:
        feature = series.adds_feature and install.has_feature()
        return (State.HAS_FEATURE if feature else State.PRISTINE), kinds, None
    if seen == patched:
        return State.NO_BACKUPS, kinds, None
    return State.MODIFIED, kinds, None


def linked_files(install: Install, series: Series) -> List[str]:
    """The touched files that are symbolic links (uv's UV_LINK_MODE=symlink)."""
    return [rel for rel in series.touched if install.path(rel).is_symlink()]


def cmd_status(install: Install) -> int:
    """Print where `install` stands for its topic. Exit 0 when it is in a
    good state."""
    status = inspect(install)
    for line in status.headline_lines("using") + status.lines:
        print(line)
    print(status.message())
    earlier = status.manifest.torch if status.manifest else None
    if earlier and earlier != install.version and not status.state.recovery:
        assert status.manifest is not None
        print(f"note: {install.state_dir} is left from torch {earlier} (base "
              f"{status.manifest.base}), which another install of torch "
              "replaced; --revert removes it")
    stale = stale_note(status)
    if stale:
        print(stale)
        return Exit.FAILED
    return status.state.exit_code


def status_record(install: Install) -> Dict[str, object]:
    """What --status says of `install`'s topic, as data (--status --json):
    the same state, exit code, base and lines as cmd_status prints."""
    status = inspect(install)
    earlier = status.manifest.torch if status.manifest else None
    stale = stale_note(status)
    return {
        "topic": install.topic.name,
        "torch": install.version,
        "site": str(install.site),
        "state": status.state.label,
        "exit_code": int(Exit.FAILED if stale else status.state.exit_code),
        "base": status.series.base if status.series else None,
        "patches": len(status.series.patches) if status.series else None,
        "identified": status.headline_lines("using")[1:],
        "files": {rel: kind.value for rel, kind in sorted(status.kinds.items())},
        "says": status.message(),
        "note": status.note,
        "left_from_torch": earlier if earlier and earlier != install.version
        and not status.state.recovery else None,
        "stale_bytecode": stale,
    }


def stale_note(status: Status) -> Optional[str]:
    """What --status says of touched files whose .pyc Python would run
    instead of them; None if there are none."""
    install = status.install
    touched = status.series.touched if status.series else []
    stale = [why for why in (stale_bytecode(install, rel) for rel in touched) if why]
    if not stale:
        return None
    return ("stale bytecode: a new process would not run the files above:\n"
            + "\n".join(f"  {why}" for why in stale)
            + "\nremove those .pyc files (Python writes them anew), or compile them "
            f"again from the files on disk: {sys.executable} -m compileall "
            "--invalidation-mode unchecked-hash " + " ".join(
                str(install.path(rel)) for rel in touched))
