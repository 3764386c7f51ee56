"""An installed torch wheel: apply, revert and inspect each topic's series
in site-packages, checked against the wheel's RECORD.

Runs under the interpreter whose torch is the target (`importlib.metadata`
then reads that install's RECORD; see _launch.py). It never imports torch: a
half-patched or foreign install must not run before we decide.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, ContextManager, Dict, List, Optional, Set, Tuple

from torch_backport.driver import Mode, Plan, Say
from torch_backport.fsio import atomic_write, link_or_copy, locked, step, temp_path
from torch_backport.releases import known_defect
from torch_backport.install import (
    APPLIED,
    MANIFEST,
    STATE_DIRNAME,
    refresh_bytecode,
    stale_bytecode,
    BACKUPS,
    drop_state,
    find_install,
    Install,
    Manifest,
    read_manifest,
    record_digest,
    remove_leftovers,
    remove_partial_writes,
    write_backups,
)
from torch_backport.series import (
    apply_series,
    final_blobs,
    fixed_bases,
    git_blob_id,
    identify,
    Identified,
    load_series,
    Refused,
    release_numbers,
    Series,
    sha256_hex,
    shown,
    supported_bases,
    Topic,
    topic_files,
    topics,
)


@dataclasses.dataclass
class Status:
    # pristine | patched | partial | outdated | patched-no-backups | modified |
    # interrupted | has-feature | unsupported | patched-wheel
    state: str
    install: Install
    series: Optional[Series]
    lines: List[str]  # per-file detail: "  <kind> <path>"
    manifest: Optional[Manifest]
    # How the series was chosen: by the files' content (None: the manifest of
    # the run that applied it names it).
    identified: Optional[Identified] = None

    def headline(self) -> str:
        where = f"torch {self.install.version} in {self.install.site}"
        topic = self.install.topic.named("topic {name}")
        if self.series:
            topic += ", " if topic else ""
            return where + f" (base {self.series.base}, {topic}{len(self.series.patches)} patches)"
        return where + (f" ({topic})" if topic else "")

    def files(self, *kinds: str) -> List[str]:
        return [line.split()[-1] for line in self.lines if line.split()[0] in kinds]

    def why(self, verb: str) -> Optional[str]:
        """Why this series, when the version string alone would not say it
        (2.12.1 gets v2.12.0's series, 2.9.0 its own): None otherwise."""
        if self.series is None or (release_numbers(self.install.version)
                                   == release_numbers(self.series.base)):
            return None
        where = shown(self.series.directory)
        if self.identified is None:
            return (f"torch {self.install.version}: patched with {where} "
                    f"(the manifest in {self.install.state_dir} says so)")
        if not self.identified.exact:
            return None  # refused or reported as modified: the lines say why
        return f"torch {self.install.version}: {self.identified.reason()}: {verb} {where}"

    def headline_lines(self, verb: str) -> List[str]:
        why = self.why(verb)
        return [self.headline()] + ([why] if why else [])


def file_kind(install: Install, rel: str, patched_digest: Optional[str],
              patched_blob: Optional[str]) -> str:
    path = install.path(rel)
    if path.is_symlink():
        return "symlink"
    if not path.is_file():
        return "missing"
    data = path.read_bytes()
    if record_digest(data) == install.record.get(rel):
        return "pristine"
    if patched_digest is not None and record_digest(data) == patched_digest:
        return "patched"
    if patched_blob is not None and git_blob_id(data) == patched_blob:
        return "patched"
    return "modified"


def choose_series(install: Install, manifest: Optional[Manifest]
                  ) -> tuple[Optional[Series], Optional[Identified]]:
    """The series for this install: the one its manifest names, if this
    torch was patched here; else the base whose files it holds byte for byte
    (pristine, or as its series makes them); else the closest base."""
    recorded = manifest.get("base") if manifest else None
    if (manifest is not None and recorded in supported_bases(install.topic)
            and manifest.get("torch") == install.version):
        return load_series(recorded, install.topic), None
    found = identify(install.topic,
                     {rel: install.blob(rel) for rel in topic_files(install.topic)},
                     install.version)
    return found.series, found


def file_lines(kinds: Dict[str, str]) -> Tuple[List[str], Set[str]]:
    """--status's per-file lines ("  <kind> <path>", by path) and the kinds seen."""
    return [f"  {kind:<9} {rel}" for rel, kind in sorted(kinds.items())], set(kinds.values())


def inspect_built(install: Install, built: Dict[str, Any]) -> Status:
    """A topic that the patched wheel this torch came from carries: its
    files are the series', and RECORD says so."""
    base = built.get("base", "")
    series = (load_series(base, install.topic) if base in supported_bases(install.topic)
              else None)
    lines, kinds = file_lines({
        rel: "patched" if install.matches_record(rel)
        and sha256_hex(install.read(rel)) == digest else "modified"
        for rel, digest in built.get("files", {}).items()})
    state = "patched-wheel" if kinds == {"patched"} else "modified"
    return Status(state, install, series, lines, None)


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
        state = "has-feature" if install.has_feature() else "unsupported"
        if state == "has-feature" and known_defect(install.topic, install.version):
            state = "unseen"
        return Status(state, install, None, [], manifest, identified)
    for rel in series.touched:
        if rel not in install.record:
            raise Refused(f"{rel} is not in torch {install.version}'s RECORD")
    linked = linked_files(install, series)
    if linked and manifest is None:
        lines, _ = file_lines({rel: "link" for rel in linked})
        return Status("linked", install, series, lines, None, identified)
    state, lines = series_state(install, series, manifest)
    return Status(state, install, series, lines,
                  None if state == "patched-no-backups" else manifest, identified)


def series_state(install: Install, series: Series, manifest: Optional[Manifest]
                 ) -> Tuple[str, List[str]]:
    """The state of an install whose series is known, and the per-file lines."""
    if manifest is None and install.state_dir.exists():
        # A state directory without its manifest: a run was killed while
        # writing or removing it.
        return "interrupted", [f"  {install.state_dir} has no manifest.json "
                               "(a run was killed part-way)"]
    if manifest is not None and manifest.get("state") != "applied":
        return "interrupted", [f"  {manifest.get('state')} run stopped part-way"]
    if manifest is not None:
        lines, kinds = file_lines({rel: file_kind(install, rel, digest, None)
                                   for rel, digest in manifest["patched"].items()})
        current = {p.name: sha256_hex(p.read_bytes()) for p in series.patches}
        same_series = (manifest["series"] == current
                       and sorted(manifest["patched"]) == series.touched)
        if kinds == {"patched"}:
            return ("patched" if same_series else "outdated"), lines
        if kinds == {"patched", "pristine"} and same_series:
            return "partial", lines
        if kinds != {"pristine"}:
            return "modified", lines
        # All pristine again: the state is stale (torch was reinstalled).
    blobs = final_blobs(series)
    lines, kinds = file_lines({rel: file_kind(install, rel, None, blobs.get(rel))
                               for rel in series.touched})
    if kinds == {"pristine"}:
        feature = series.adds_feature and install.has_feature()
        return ("has-feature" if feature else "pristine"), lines
    if kinds == {"patched"}:
        return "patched-no-backups", lines
    return "modified", lines


def restore_pristine(install: Install, manifest: Manifest) -> List[str]:
    """Put every file the manifest names back to the wheel's bytes, from the backups."""
    restored: List[str] = []
    backups = install.state_dir / BACKUPS
    for rel in sorted(manifest["pristine"]):
        target = install.path(rel)
        if (target.is_file() and not target.is_symlink()
                and record_digest(target.read_bytes()) == install.record[rel]):
            continue
        backup = backups / rel
        data = backup.read_bytes() if backup.is_file() else b""
        if record_digest(data) != install.record[rel]:
            raise Refused(
                f"the backup of {rel} in {backups} does not match torch's RECORD; "
                f"reinstall torch ({reinstall_command(install)})"
            )
        # The backup's own file, by link and rename: no space needed, so a
        # full disk cannot stop a rollback.
        link_or_copy(backup, temp_path(target))
        os.chmod(temp_path(target), manifest["modes"].get(rel, 0o644))
        step(target)
        os.replace(temp_path(target), target)
        refresh_bytecode(install, rel)
        restored.append(rel)
    return restored


def restore_without_manifest(install: Install, series: Series) -> List[str]:
    """A state dir whose manifest is gone: put back each touched file that is
    not the wheel's from a backup that matches RECORD, or refuse."""
    manifest = {"pristine": {rel: install.record[rel] for rel in series.touched},
                "modes": {}}
    return restore_pristine(install, manifest)


def installer(install: Install) -> str:
    """The installer that made this torch (INSTALLER in its dist-info): pip, uv, ..."""
    return (install.dist.read_text("INSTALLER") or "pip").strip() or "pip"


def reinstall_command(install: Install, link_mode: str = "") -> str:
    """The command of the installer that made this torch that puts the stock
    wheel's files back (a uv venv often has no pip)."""
    version = (install.built or {}).get("from", {}).get("version", install.version)
    if installer(install) == "uv":
        prefix = f"UV_LINK_MODE={link_mode} " if link_mode else ""
        return (f"{prefix}uv pip install -p {sys.executable} --reinstall-package torch "
                f"--no-deps torch=={version}")
    return f"{sys.executable} -m pip install --force-reinstall --no-deps torch=={version}"


def linked_files(install: Install, series: Series) -> List[str]:
    """The touched files that are symbolic links (uv's UV_LINK_MODE=symlink)."""
    return [rel for rel in series.touched if install.path(rel).is_symlink()]


def linked_message(install: Install, linked: List[str]) -> str:
    target = install.path(linked[0]).resolve().parent
    whose = "uv's cache" if installer(install) == "uv" else "another directory"
    return (f"linked: the files the series touches are symbolic links into {whose} "
            f"({target}, ...): patching them would change every venv that shares it, so "
            "nothing is patched there. Install torch as copies, then apply: "
            f"{reinstall_command(install, link_mode='copy')}")


def built_from(install: Install) -> str:
    source = (install.built or {}).get("from", {})
    return f"{source.get('wheel', 'a torch wheel')}, by {install.built_by()}"


def recover_would(status: Status) -> str:
    what = status.manifest.get("state") if status.manifest else "earlier"
    return f"would roll back the interrupted {what} run and restore the wheel's files"


def recover(status: Status, say: Say) -> None:
    """Finish or roll back the run that `status` found interrupted."""
    assert status.series is not None
    what = status.manifest.get("state") if status.manifest else "earlier"
    if status.manifest is not None and "pristine" in status.manifest:
        restored = restore_pristine(status.install, status.manifest)
    else:
        restored = restore_without_manifest(status.install, status.series)
    remove_partial_writes(status.install, status.series.touched)
    drop_state(status.install)
    done = ("finished an interrupted revert" if what == "reverting"
            else f"rolled back an interrupted {what} run")
    say(f"{done}: restored {len(restored)} file(s) to the wheel's bytes")


def unwritable(install: Install, series: Series) -> List[str]:
    """Directories this run must write to but cannot (a non-owner's run)."""
    needed = {install.site} | {install.path(rel).parent for rel in series.touched}
    return sorted(str(d) for d in needed if not os.access(d, os.W_OK | os.X_OK))


def refuse_unwritable(install: Install, series: Series) -> None:
    blocked = unwritable(install, series)
    if not blocked:
        return
    if os.statvfs(install.site).f_flag & os.ST_RDONLY:
        raise Refused(f"{install.site} is on a read-only filesystem; patch the image where "
                      "it is built, or mount it read-write; nothing was changed")
    raise Refused(
        "cannot write to:\n" + "\n".join(f"  {d}" for d in blocked)
        + f"\nrun as the owner of the install ({owner_of(install.site)}); "
        "nothing was changed")


def owner_of(path: Path) -> str:
    import pwd

    uid = path.stat().st_uid
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def cmd_status(install: Install) -> int:
    """Print where `install` stands for its topic. Exit 0 when it is in a
    good state."""
    status = inspect(install)
    for line in status.headline_lines("using") + status.lines:
        print(line)
    messages = {
        "pristine": "pristine: every file the series touches matches torch's RECORD",
        "patched": f"patched: the series is applied (revert with {revert_flags(install)})",
        "partial": "partly reverted by hand: the files marked pristine are the wheel's "
        "again; apply patches them again, --revert restores the others",
        "patched-no-backups": "patched without backups: the files are exactly what this "
        f"series makes, but {install.state_dir} with the originals is gone (deleted, or "
        "the files were copied from an overlay); --revert cannot restore them: "
        f"reinstall torch ({reinstall_command(install)})",
        "modified": "modified: the files marked modified differ from both the wheel and "
        "the series",
        "outdated": "outdated: an earlier version of the series is applied; "
        "apply replaces it, --revert removes it",
        "interrupted": "interrupted: an earlier run stopped part-way; "
        "--revert or the next apply rolls it back",
        "has-feature": f"has the feature: {install.topic.present}; nothing to apply"
        + no_fixes_note(status),
        "unsupported": f"unsupported: {unsupported_detail(status)}",
        "unseen": unseen_message(status),
        "linked": linked_message(install, status.files("link")) if status.state == "linked"
        else "",
        "patched-wheel": "patched: installed from a patched wheel (built from "
        f"{built_from(install)}); --revert cannot undo it: install the stock wheel "
        f"({reinstall_command(install)})",
    }
    print(messages[status.state])
    earlier = (status.manifest or {}).get("torch")
    if earlier and earlier != install.version and status.state != "interrupted":
        print(f"note: {install.state_dir} is left from torch {earlier} (base "
              f"{(status.manifest or {}).get('base')}), which another install of torch "
              "replaced; --revert removes it")
    stale = [why for why in (stale_bytecode(install, rel) for rel in (
        status.series.touched if status.series else [])) if why]
    if stale:
        print("stale bytecode: a new process would not run the files above:\n"
              + "\n".join(f"  {why}" for why in stale)
              + "\nremove those .pyc files (Python writes them anew), or compile them "
              f"again from the files on disk: {sys.executable} -m compileall "
              "--invalidation-mode unchecked-hash " + " ".join(
                  str(install.path(rel)) for rel in (status.series.touched
                                                     if status.series else [])))
        return 1
    if status.state == "unseen":
        return UNSEEN_EXIT
    return 0 if status.state in ("pristine", "patched", "has-feature", "patched-wheel") else 1


# --status on a release this project has not seen, with a known defect: not
# 0 (nothing is fixed), not 1 (nothing is broken in the install either).
UNSEEN_EXIT = 3
# What --status --expect patched accepts of a default topic.
AS_EXPECTED = ("patched", "patched-wheel", "has-feature")


def unseen_message(status: Status) -> str:
    """A release with the feature whose files match no series here, on which
    the results defect is to be expected: what is known, and what to do."""
    install = status.install
    found = status.identified
    files = f" ({found.reason()})" if found is not None and found.series is not None else ""
    return (
        f"unseen: torch {install.version} has the feature ({install.topic.present}), but "
        f"this version of torch-pregrad-backport has no series for its files{files}.\n"
        f"The results defect is known on every release from "
        f"{known_defect(install.topic, install.version)}, the newest tested: compile_fx on "
        "a GraphModule with freezing, under the default or late timing, returns wrong "
        "numbers (resnet50 off by up to 122; docs/results-fixes.md). Expect it here too.\n"
        "What to do: a newer torch-pregrad-backport that lists this release; or, from a "
        f"clone, scripts/new-base {'.'.join(map(str, release_numbers(install.version)))} "
        f"--python {sys.executable} (docs/patch-contract.md, \"Day one of a new release\"); "
        "until then torch._inductor.config.pre_grad_pass_timing = \"early\" avoids the "
        "defect, at the cost of the warm-start savings.")


def revert_flags(install: Install) -> str:
    return "--revert" + install.topic.named(" --topic {name}")


def describe_files(status: Status) -> str:
    """The files that block a run, each with what is wrong with it."""
    wrong = {"modified": "differs from the wheel and the series",
             "missing": "is missing",
             "symlink": "is a symbolic link (replaced after the series was applied)"}
    return "\n".join(f"  {status.install.site / line.split()[-1]}: {wrong[line.split()[0]]}"
                     for line in status.lines if line.split()[0] in wrong)


def unsupported_detail(status: Status) -> str:
    """Why no series fits: which files differ from the closest base's."""
    topic = status.install.topic
    found = status.identified
    detail = (topic.named("topic {name} has no series that matches these files")
              or "no series of this topic matches these files")
    if found is not None and found.series is not None:
        detail += f" ({found.reason()})"
    return detail + "; supported bases: " + ", ".join(supported_bases(topic))


def processes_using(install: Install) -> List[Tuple[int, str]]:
    """(pid, command line) of the other processes that have this install's
    torch loaded (Linux: /proc/*/maps names its torch/lib/libtorch*); those
    this user may not read are not seen."""
    lib = f"{install.site / 'torch' / 'lib'}/libtorch"
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        if proc.name == str(os.getpid()):
            continue
        try:
            with open(proc / "maps", errors="replace") as maps:
                if not any(lib in line for line in maps):
                    continue
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                errors="replace").strip()
        except OSError:
            continue
        found.append((int(proc.name), command))
    return sorted(found)


def running_note(install: Install) -> List[str]:
    """What a run that writes says of processes running this torch."""
    running = processes_using(install)
    if not running:
        return []
    return ([f"note: {len(running)} running process(es) have this torch loaded; they keep "
             "the code they imported. One that imported torch._inductor before this run may "
             "fail on its next compile (e.g. AttributeError: torch._inductor.config."
             "pre_grad_pass_timing does not exist): restart them:"]
            + [f"  pid {pid}: {' '.join(command.split())[:500]}" for pid, command in running])


def expectation(install: Install) -> Optional[str]:
    """Why `install`'s topic is not as --status --expect patched requires
    (applied, or upstream's); None if it is."""
    state = inspect(install).state
    if state in AS_EXPECTED:
        return None
    return f"{install.topic.name} is {state}"


def not_available(install: Install, command: str) -> Optional[List[str]]:
    """What `command` says of a topic that no series fits here and that the
    run leaves alone; None if a series fits (or the torch has the feature)."""
    status = inspect(install)
    if status.state != "unsupported":
        return None
    outcome = "; left alone" if command == "apply" else ""
    return [status.headline(),
            f"not available for this release: {unsupported_detail(status)}{outcome}"]


def refuse_unless_applicable(status: Status) -> None:
    if status.state == "unsupported":
        topic = status.install.topic
        found = status.identified
        closest = (f": its files match no base's ({found.reason()})"
                   if found is not None and found.series is not None else "")
        raise Refused(
            f"torch {status.install.version} is not a supported base"
            + topic.qualified("of")
            + f"{closest} (supported: {', '.join(supported_bases(topic))}); nothing was changed"
        )
    if status.state == "modified":
        what = ("the series is applied, but files changed since"
                if status.manifest is not None else "files differ from torch's RECORD")
        raise Refused(
            f"{what}, so nothing was changed:\n" + describe_files(status)
            + f"\nreinstall torch ({reinstall_command(status.install)}"
            f") or undo the local edits"
        )


def no_fixes_note(status: Status) -> str:
    """For a torch that has the feature but no series here: where this
    topic's fixes for releases with the feature exist, if it has any."""
    topic = status.install.topic
    if status.series is not None:
        return ""
    bases = supported_bases(topic)
    fixes = fixed_bases(topic)
    if not fixes:
        return ""
    if topic.primary:
        return ("\nnote: this project's results fixes (see README, patch ledger) exist "
                "only for the supported bases: " + ", ".join(bases))
    return (f"\nnote: topic {topic.name} has series for releases that have its change "
            "upstream only for: " + ", ".join(fixes))


def plan_apply(install: Install, plan: Plan) -> None:
    """Apply the topic's series: `plan` gets what the run says and writes."""
    status = inspect(install)
    plan.said += status.headline_lines("applying" if status.state == "pristine" else "using")
    if status.state == "patched-wheel":
        plan.say(f"already applied: installed from a patched wheel ({built_from(install)}); "
                 "nothing to do")
        return
    if status.series is not None and status.state not in ("patched", "has-feature"):
        refuse_unwritable(install, status.series)
    if status.state != "interrupted":
        plan_series(status, plan)
        return
    plan.would = [recover_would(status), "then would apply the series"]

    def recover_then_apply(say: Say) -> None:
        recover(status, say)
        then = Plan()
        plan_series(inspect(install), then)
        for line in then.said:
            say(line)
        then.execute(say)
    plan.writes = recover_then_apply


def plan_series(status: Status, plan: Plan) -> None:
    """The writes that bring `status`'s install to its series, from any
    state but interrupted."""
    install = status.install
    nothing_to_do = {
        "patched": "already applied: nothing to do",
        "patched-no-backups": "already applied, but without backups: nothing to do "
        f"(--revert cannot undo it; reinstall torch to: {reinstall_command(install)})",
        "has-feature": f"{install.topic.present} in this torch: it has the feature, "
        "nothing to do" + no_fixes_note(status),
    }
    if status.state in nothing_to_do:
        plan.say(nothing_to_do[status.state])
        return
    if status.state == "unseen":
        raise Refused(unseen_message(status) + "\nNothing was changed.")
    if status.state == "linked":
        raise Refused(linked_message(install, status.files("link")) + "\nNothing was changed.")
    if status.state not in ("outdated", "partial"):
        refuse_unless_applicable(status)
    series = status.series
    assert series is not None
    # An earlier series' originals are in its backups; build the new files
    # from those before anything is written, so a failure changes nothing.
    backups = (status.manifest["pristine"]
               if status.state in ("outdated", "partial") and status.manifest else {})
    pristine = {rel: install.backup(rel).read_bytes() if rel in backups
                else install.read(rel) for rel in series.touched}
    patched = apply_series(pristine, series)
    if status.state == "partial":
        todo = status.files("pristine")
        plan.would = [f"  would patch {rel} again" for rel in todo]
        plan.would.append(f"check: {len(todo)} file(s) were reverted by hand and would be "
                          "patched again, nothing was written")
        plan.writes = lambda say: patch_again(install, todo, patched, say)
        return
    if status.state == "outdated":
        plan.would.append("an earlier version of the series is applied: would replace it")
    plan.would += [f"  would patch {rel}" for rel in series.touched]
    plan.would.append(f"check: the series applies cleanly; {len(series.touched)} file(s) "
                      "would change, nothing was written")
    plan.writes = lambda say: write_series(status, pristine, patched, say)


def patch_again(install: Install, todo: List[str], patched: Dict[str, bytes],
                say: Say) -> None:
    """Patch again the files of a partly reverted install that were reverted by hand."""
    for rel in todo:
        atomic_write(install.path(rel), patched[rel], install.path(rel).stat().st_mode & 0o7777)
        refresh_bytecode(install, rel)
        say(f"  patched {rel} again")
    say(f"applied: {len(todo)} file(s) that were reverted by hand are patched again")


def write_series(status: Status, pristine: Dict[str, bytes], patched: Dict[str, bytes],
                 say: Say) -> None:
    """Keep the originals, then write the patched files, as one transaction:
    a failure part-way restores every file to the wheel's bytes."""
    install, series = status.install, status.series
    assert series is not None
    if status.state == "outdated":
        assert status.manifest is not None
        restore_pristine(install, status.manifest)
        drop_state(install)
        say("an earlier version of the series was applied: restored the wheel's "
            "files, now applying this one")
    elif status.manifest is not None:
        drop_state(install)  # left by an earlier install of torch that was replaced
    remove_leftovers(install)
    remove_partial_writes(install, series.touched)
    write_backups(install, series, pristine, patched)
    # Only renames from here: a full disk cannot stop them part-way, and the
    # rollback below puts the backups back by rename too.
    try:
        for rel in series.touched:
            step(install.path(rel))
            os.replace(temp_path(install.path(rel)), install.path(rel))
            refresh_bytecode(install, rel)
            say(f"  patched {rel}")
        step(install.manifest_path)
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


def plan_revert(install: Install, plan: Plan) -> None:
    """Restore the wheel's files from the backups: `plan` gets what the run
    says and writes."""
    status = inspect(install)
    plan.said += status.headline_lines("using")
    if status.state == "patched-wheel":
        raise Refused(f"torch {install.version} was installed from a patched wheel "
                      f"({built_from(install)}): there are no backups to revert to, and "
                      "nothing was changed; install the stock wheel instead: "
                      f"{reinstall_command(install)}")
    if status.series is not None and status.state in ("interrupted", "patched", "partial",
                                                      "outdated"):
        refuse_unwritable(install, status.series)
    if status.state == "interrupted":
        plan.would = [recover_would(status)]
        plan.writes = lambda say: recover(status, say)
        return
    if status.state in ("pristine", "has-feature", "unsupported", "linked"):
        if status.manifest is not None and status.state == "pristine":
            plan.writes = lambda say: drop_state(install)  # stale: torch was replaced
        elif status.manifest is not None:
            plan.say(f"note: {install.state_dir} holds backups of an earlier apply to a "
                     f"different torch; left alone")
        else:
            plan.writes = lambda say: remove_leftovers(install)
        plan.say(f"nothing to revert: {status.state}")
        return
    refuse_unless_revertible(status)
    plan.would = [f"  would restore {rel}" for rel in status.files("patched")]
    plan.would.append("check: nothing was written")
    plan.writes = lambda say: restore_series(status, say)


def refuse_unless_revertible(status: Status) -> None:
    install = status.install
    if status.state == "patched-no-backups":
        raise Refused(
            "the files are patched by this series, but the backups in "
            f"{install.state_dir} are gone, so nothing was reverted; reinstall torch "
            f"({reinstall_command(install)}) to get the wheel's files back")
    if status.state == "modified":
        what = ("files changed after the series was applied, so nothing was reverted"
                if status.manifest is not None else
                "refused: files differ from torch's RECORD, and the series was not "
                f"applied by this script (no backups in {install.state_dir}), so it has no "
                "originals to put back")
        raise Refused(f"{what}:\n" + describe_files(status)
                      + f"\nreinstall torch ({reinstall_command(install)}"
                      ") to get the wheel's files back")


def restore_series(status: Status, say: Say) -> None:
    install = status.install
    assert status.series is not None and status.manifest is not None
    manifest = dict(status.manifest, state="reverting")
    atomic_write(install.manifest_path, json.dumps(manifest, indent=2).encode(), 0o644)
    restored = restore_pristine(install, manifest)
    for rel in restored:
        say(f"  restored {rel}")
    drop_state(install)
    after = inspect(install)
    if after.state != "pristine":
        raise Refused("after the revert the files still differ from RECORD:\n"
                      + "\n".join(after.lines))
    say(f"reverted: {len(restored)} file(s) are byte-identical to torch's RECORD again")


def installed_base(topic: Topic) -> Optional[str]:
    """The base whose pristine or patched files this interpreter's torch holds."""
    try:
        status = inspect(find_install(topic))
    except Refused:
        return None
    if status.series is None or status.state not in ("pristine", "patched"):
        return None
    return status.series.base


def note_other_topics(install: Install, chosen: List[Topic]) -> None:
    """After a plain --revert: say which opt-in topics are still applied."""
    for topic in topics():
        if topic not in chosen and install.for_topic(topic).state_dir.exists():
            print(f"note: topic {topic.name} is still applied; revert it with "
                  f"--revert --topic {topic.name}")


class InstallMode(Mode):
    """The driver's view of an installed torch."""

    def __init__(self, install: Install) -> None:
        self.install = install
        self.warned = False  # about running processes: once a run

    def status(self, topic: Topic) -> int:
        return cmd_status(self.install.for_topic(topic))

    def plan(self, command: str, topic: Topic, plan: Plan) -> None:
        planner = plan_apply if command == "apply" else plan_revert
        planner(self.install.for_topic(topic), plan)
        if plan.writes is not None and not self.warned:
            self.warned = True
            plan.said += running_note(self.install)

    def not_available(self, command: str, topic: Topic) -> Optional[List[str]]:
        return not_available(self.install.for_topic(topic), command)

    def series_for(self, topic: Topic) -> Optional[Series]:
        return inspect(self.install.for_topic(topic)).series

    def session(self) -> ContextManager[None]:
        return locked(self.install.site)

    def reading(self) -> ContextManager[None]:
        return locked(self.install.site, shared=True)

    def is_applied(self, topic: Topic) -> bool:
        return inspect(self.install.for_topic(topic)).state == "patched"

    def unexpected(self, topic: Topic) -> Optional[str]:
        return expectation(self.install.for_topic(topic))

    def unapplied_defaults(self, chosen: List[Topic]) -> List[str]:
        states = {}
        for topic in chosen:
            try:
                states[topic.name] = inspect(self.install.for_topic(topic)).state
            except Refused:
                states[topic.name] = "unsupported"
        defaults = [topic.name for topic in chosen if topic.applied == "default"]
        applied = {"patched", "patched-wheel", "patched-no-backups"}
        if not {states[name] for name in defaults} & applied:
            return []  # no default topic applied: stock, or an opt-in topic alone
        return [name for name in defaults if states[name] == "pristine"]

    def after_plain_revert(self, chosen: List[Topic]) -> None:
        note_other_topics(self.install, chosen)

    def interrupted(self) -> Optional[str]:
        return ("interrupted: any file already written was restored; "
                "--status tells where the install stands")

    def failed(self, command: str, topic: Optional[Topic]) -> Optional[str]:
        if command not in ("apply", "revert"):
            return None
        try:
            state = inspect(find_install(topic)).state
        except (OSError, Refused):
            state = "unknown"
        return {"pristine": "the install is pristine: nothing was changed",
                "patched": "the install is patched",
                "interrupted": "the run stopped part-way: rerun once the cause is "
                "fixed, or --revert, to finish or roll it back"}.get(
                    state, f"the install is {state}: see --status")


def orphans() -> List[Path]:
    """This project's state directories in this interpreter's site-packages."""
    import sysconfig
    sites = {Path(sysconfig.get_paths()[kind]) for kind in ("purelib", "platlib")}
    return sorted(path for site in sites if site.is_dir()
                  for path in site.glob(f"{STATE_DIRNAME}*") if path.is_dir())


def describe_state(path: Path) -> str:
    """What a state directory belonged to, and its size."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        what = f"torch {manifest.get('torch')}, base {manifest.get('base')}"
    except (OSError, ValueError):
        what = "no readable manifest"
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return f"{what}, {(size + 1023) // 1024} KB"


def without_torch(command: str, check: bool) -> Optional[int]:
    """An interpreter without torch whose site-packages holds this project's
    state (torch was uninstalled while patched): --status names it and the
    command that removes it; --revert removes it and nothing else. None
    where torch is installed or nothing is left."""
    from importlib import metadata
    try:
        metadata.distribution("torch")
        return None
    except metadata.PackageNotFoundError:
        pass
    found = orphans()
    if not found:
        return None
    if command == "revert":
        for path in found:
            print(f"{'would remove' if check else 'removed'} {path} ({describe_state(path)})")
            if not check:
                trash = path.with_name(path.name + ".trash-orphan")
                os.replace(path, trash)
                shutil.rmtree(trash)
        print(f"{sys.executable} has no torch installed; "
              + ("nothing was written" if check else
                 "this project's leftover state is removed"))
        return 0
    print(f"{sys.executable} has no torch installed, but site-packages holds this project's "
          "state from a torch that was uninstalled while patched:")
    for path in found:
        print(f"  {path} ({describe_state(path)})")
    print(f"remove it (and nothing else) with: --python {sys.executable} --revert")
    return 1


def open_install(chosen: List[Topic]) -> InstallMode:
    return InstallMode(find_install())
