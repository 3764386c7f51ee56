"""An installed torch wheel: apply, revert and inspect each topic's series
in site-packages, checked against the wheel's RECORD.

Runs under the interpreter whose torch is the target (`importlib.metadata`
then reads that install's RECORD; see _launch.py). It never imports torch: a
half-patched or foreign install must not run before we decide. Here are the
plans (what apply and revert would do, or why they refuse) and the driver's
`InstallMode`; where the install stands is status.py (its `State`,
state.py), and every write is transaction.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import ContextManager, Dict, List, Optional, Tuple

from torch_backport.patchset.apply import apply_series
from torch_backport.patchset.driver import Mode, Plan, Say
from torch_backport.infra.errors import Refused
from torch_backport.infra.fsio import locked
from torch_backport.installed.install import find_install, Install, MANIFEST, STATE_DIRNAME
from torch_backport.installed.records import Manifest, UNREADABLE
from torch_backport.installed.state import (
    built_from,
    FileKind,
    describe_files,
    no_fixes_note,
    reinstall_command,
    State,
    Status,
    unsupported_detail,
)
from torch_backport.patchset.series import Applied, Series, supported_bases, Topic, topics
from torch_backport.installed.transaction import (
    drop_state,
    patch_again,
    recover,
    remove_leftovers,
    restore_series,
    write_series,
)
from torch_backport.installed.status import cmd_status, inspect, status_record
from torch_backport.infra.exit_codes import Exit


def recover_would(status: Status) -> str:
    what = status.manifest.state if status.manifest else "earlier"
    return f"would roll back the interrupted {what} run and restore the wheel's files"


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
    if state.expected:
        return None
    return f"{install.topic.name} is {state.label}"


def not_available(install: Install, command: str) -> Optional[List[str]]:
    """What `command` says of a topic that no series fits here and that the
    run leaves alone; None if a series fits (or the torch has the feature)."""
    status = inspect(install)
    if status.state is not State.UNSUPPORTED:
        return None
    outcome = "; left alone" if command == "apply" else ""
    return [status.headline(),
            f"not available for this release: {unsupported_detail(status)}{outcome}"]


def refuse_unless_applicable(status: Status) -> None:
    if status.state is State.UNSUPPORTED:
        topic = status.install.topic
        found = status.identified
        closest = (f": its files match no base's ({found.reason()})"
                   if found is not None and found.series is not None else "")
        raise Refused(
            f"torch {status.install.version} is not a supported base"
            + topic.of_topic("of")
            + f"{closest} (supported: {', '.join(supported_bases(topic))}); nothing was changed"
        )
    if status.state is State.MODIFIED:
        what = ("the series is applied, but files changed since"
                if status.manifest is not None else "files differ from torch's RECORD")
        raise Refused(
            f"{what}, so nothing was changed:\n" + describe_files(status)
            + f"\nreinstall torch ({reinstall_command(status.install)}"
            f") or undo the local edits"
        )


def plan_apply(install: Install, plan: Plan) -> None:
    """Apply the topic's series: `plan` gets what the run says and writes."""
    status = inspect(install)
    plan.said += status.headline_lines("applying" if status.state is State.PRISTINE
                                       else "using")
    if status.state is State.PATCHED_WHEEL:
        plan.say(f"already applied: installed from a patched wheel ({built_from(install)}); "
                 "nothing to do")
        return
    if status.series is not None and status.state not in (State.PATCHED, State.HAS_FEATURE):
        refuse_unwritable(install, status.series)
    if not status.state.recovery:
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
        State.PATCHED: "already applied: nothing to do",
        State.NO_BACKUPS: "already applied, but without backups: nothing to do "
        f"(--revert cannot undo it; reinstall torch to: {reinstall_command(install)})",
        State.HAS_FEATURE: f"{install.topic.present} in this torch: it has the feature, "
        "nothing to do" + no_fixes_note(status),
    }
    if status.state in nothing_to_do:
        plan.say(nothing_to_do[status.state])
        return
    if status.state in (State.UNSEEN, State.LINKED):
        raise Refused(status.message() + "\nNothing was changed.")
    if status.state not in (State.OUTDATED, State.PARTIAL):
        refuse_unless_applicable(status)
    series = status.series
    assert series is not None
    # An earlier series' originals are in its backups; build the new files
    # from those before anything is written, so a failure changes nothing.
    backups = (status.manifest.pristine
               if status.state in (State.OUTDATED, State.PARTIAL) and status.manifest else {})
    pristine = {rel: install.read_backup(rel) if rel in backups
                else install.read(rel) for rel in series.touched}
    patched = apply_series(pristine, series)
    if status.state is State.PARTIAL:
        todo = status.files(FileKind.PRISTINE)
        plan.would = [f"  would patch {rel} again" for rel in todo]
        plan.would.append(f"check: {len(todo)} file(s) were reverted by hand and would be "
                          "patched again, nothing was written")
        plan.writes = lambda say: patch_again(install, todo, patched, say)
        return
    if status.state is State.OUTDATED:
        plan.would.append("an earlier version of the series is applied: would replace it")
    plan.would += [f"  would patch {rel}" for rel in series.touched]
    plan.would.append(f"check: the series applies cleanly; {len(series.touched)} file(s) "
                      "would change, nothing was written")
    plan.writes = lambda say: write_series(status, pristine, patched, say)


def plan_revert(install: Install, plan: Plan) -> None:
    """Restore the wheel's files from the backups: `plan` gets what the run
    says and writes."""
    status = inspect(install)
    plan.said += status.headline_lines("using")
    if status.state is State.PATCHED_WHEEL:
        raise Refused(f"torch {install.version} was installed from a patched wheel "
                      f"({built_from(install)}): there are no backups to revert to, and "
                      "nothing was changed; install the stock wheel instead: "
                      f"{reinstall_command(install)}")
    if status.series is not None and status.state.revertible:
        refuse_unwritable(install, status.series)
    if status.state.recovery:
        plan.would = [recover_would(status)]
        plan.writes = lambda say: recover(status, say)
        return
    if status.state.unchanged:
        if status.manifest is not None and status.state is State.PRISTINE:
            plan.writes = lambda say: drop_state(install)  # stale: torch was replaced
        elif status.manifest is not None:
            plan.say(f"note: {install.state_dir} holds backups of an earlier apply to a "
                     f"different torch; left alone")
        else:
            plan.writes = lambda say: remove_leftovers(install)
        plan.say(f"nothing to revert: {status.state.label}")
        return
    if status.series is None:  # an unseen release: no series was ever applied to it
        plan.say(f"nothing to revert: {status.state.label}")
        return
    refuse_unless_revertible(status)
    plan.would = [f"  would restore {rel}" for rel in status.files(FileKind.PATCHED)]
    plan.would.append("check: nothing was written")
    plan.writes = lambda say: restore_series(status, say)


def refuse_unless_revertible(status: Status) -> None:
    install = status.install
    if status.state is State.NO_BACKUPS:
        raise Refused(
            "the files are patched by this series, but the backups in "
            f"{install.state_dir} are gone, so nothing was reverted; reinstall torch "
            f"({reinstall_command(install)}) to get the wheel's files back")
    if status.state is State.MODIFIED:
        what = ("files changed after the series was applied, so nothing was reverted"
                if status.manifest is not None else
                "refused: files differ from torch's RECORD, and the series was not "
                f"applied by this script (no backups in {install.state_dir}), so it has no "
                "originals to put back")
        raise Refused(f"{what}:\n" + describe_files(status)
                      + f"\nreinstall torch ({reinstall_command(install)}"
                      ") to get the wheel's files back")


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

    def status_record(self, topic: Topic) -> Dict[str, object]:
        return status_record(self.install.for_topic(topic))

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
        return inspect(self.install.for_topic(topic)).state is State.PATCHED

    def unexpected(self, topic: Topic) -> Optional[str]:
        return expectation(self.install.for_topic(topic))

    def unapplied_defaults(self, chosen: List[Topic]) -> List[str]:
        states = {}
        for topic in chosen:
            try:
                states[topic.name] = inspect(self.install.for_topic(topic)).state
            except Refused:
                states[topic.name] = State.UNSUPPORTED
        defaults = [topic.name for topic in chosen if topic.applied is Applied.DEFAULT]
        if not any(states[name].applied for name in defaults):
            return []  # no default topic applied: stock, or an opt-in topic alone
        return [name for name in defaults if states[name] is State.PRISTINE]

    def after_plain_revert(self, chosen: List[Topic]) -> None:
        note_other_topics(self.install, chosen)

    def interrupted(self) -> Optional[str]:
        return ("interrupted: any file already written was restored; "
                "--status tells where the install stands")

    def failed(self, command: str, topic: Optional[Topic]) -> Optional[str]:
        if command not in ("apply", "revert"):
            return None
        try:
            state = inspect(find_install(topic)).state.label
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
        manifest = Manifest.from_json((path / MANIFEST).read_text())
        what = (f"torch {manifest.torch}, base {manifest.base}"
                if manifest.state != UNREADABLE else "no readable manifest")
    except OSError:
        what = "no readable manifest"
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
    return f"{what}, {(size + 1023) // 1024} KB"


def without_torch(command: str, check: bool, as_json: bool = False) -> Optional[int]:
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
        return Exit.OK
    if as_json:
        print(json.dumps({"python": sys.executable, "torch": None, "topics": [],
                          "partly_applied": [],
                          "leftover_state": [str(path) for path in found],
                          "says": f"remove it (and nothing else) with: --python "
                                  f"{sys.executable} --revert",
                          "exit_code": int(Exit.FAILED)}, indent=2))
        return Exit.FAILED
    print(f"{sys.executable} has no torch installed, but site-packages holds this project's "
          "state from a torch that was uninstalled while patched:")
    for path in found:
        print(f"  {path} ({describe_state(path)})")
    print(f"remove it (and nothing else) with: --python {sys.executable} --revert")
    return Exit.FAILED


def open_install(chosen: List[Topic]) -> InstallMode:
    return InstallMode(find_install())
