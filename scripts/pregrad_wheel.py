"""Apply, revert and inspect the backport series on an installed torch wheel.

Called by scripts/apply.sh, under the interpreter whose torch is the target
(`importlib.metadata` then reads that install's RECORD). It never imports
torch: a half-patched or foreign install must not run before we decide.

Exit codes: 0 done or nothing to do, 1 refused or failed, 2 usage.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Dict, Iterator, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pregrad_series import (  # noqa: E402  (one series model for every path)
    apply_series,
    load_series,
    pristine_table,
    REPO,
    Refused,
    Series,
    shown,
    supported_bases,
)
STATE_DIRNAME = ".torch-pregrad-backport"
MANIFEST = "manifest.json"
# Fault injection for the interruption tests: exit hard after writing N files.
KILL_AFTER_ENV = "_PREGRAD_TEST_KILL_AFTER_FILES"
FEATURE_RE = re.compile(r"^pre_grad_pass_timing\s*:", re.MULTILINE)


def base_for_version(version: str) -> str:
    """'2.11.0+cu128' -> 'v2.11.0': local build tags share the base's sources."""
    return "v" + version.split("+", 1)[0]


def record_digest(data: bytes) -> str:
    """The RECORD form of a sha256: urlsafe base64 without padding."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def has_feature(config_py: bytes) -> bool:
    return FEATURE_RE.search(config_py.decode("utf-8", "replace")) is not None


# --------------------------------------------------------------------------
# An installed wheel


@dataclasses.dataclass
class Install:
    dist: metadata.Distribution
    site: Path
    version: str
    record: Dict[str, str]  # path -> RECORD sha256 digest, for every hashed file

    @property
    def state_dir(self) -> Path:
        return self.site / STATE_DIRNAME

    def path(self, rel: str) -> Path:
        return self.site / rel

    def read(self, rel: str) -> bytes:
        return self.path(rel).read_bytes()


def find_install() -> Install:
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        raise Refused(f"{sys.executable} has no torch installed") from None
    record: Dict[str, str] = {}
    for entry in dist.files or []:
        if entry.hash is not None and entry.hash.mode == "sha256":
            record[entry.as_posix()] = entry.hash.value
    if not record:
        raise Refused(
            f"torch {dist.version}: its RECORD has no sha256 hashes, so pristine "
            "files cannot be told from modified ones"
        )
    site = Path(str(dist.locate_file(""))).resolve()
    return Install(dist, site, dist.version, record)


@dataclasses.dataclass
class Status:
    state: str  # pristine | patched | modified | interrupted | has-feature | unsupported
    install: Install
    series: Optional[Series]
    lines: List[str]  # per-file detail
    manifest: Optional[dict]

    def headline(self) -> str:
        where = f"torch {self.install.version} in {self.install.site}"
        base = f" (base {self.series.base}, {len(self.series.patches)} patches)" if self.series else ""
        return where + base


def read_manifest(install: Install) -> Optional[dict]:
    path = install.state_dir / MANIFEST
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def inspect(install: Install) -> Status:
    manifest = read_manifest(install)
    base = base_for_version(install.version)
    config_rel = "torch/_inductor/config.py"
    if base not in supported_bases():
        if install.path(config_rel).is_file() and has_feature(install.read(config_rel)):
            return Status("has-feature", install, None, [], manifest)
        return Status("unsupported", install, None, [], manifest)
    series = load_series(base)
    if manifest is not None and manifest.get("state") != "applied":
        lines = [f"  {manifest.get('state')} run stopped part-way"]
        return Status("interrupted", install, series, lines, manifest)
    if manifest is not None:
        lines = []
        kinds = set()
        for rel, patched_digest in sorted(manifest["patched"].items()):
            digest = record_digest(install.read(rel)) if install.path(rel).is_file() else ""
            kind = ("patched" if digest == patched_digest
                    else "pristine" if digest == install.record.get(rel) else "modified")
            kinds.add(kind)
            lines.append(f"  {kind:<9} {rel}")
        if kinds == {"patched"}:
            current = {p.name: sha256_hex(p.read_bytes()) for p in series.patches}
            if manifest["series"] == current and sorted(manifest["patched"]) == series.touched:
                return Status("patched", install, series, lines, manifest)
            return Status("outdated", install, series, lines, manifest)
        if kinds != {"pristine"}:
            return Status("modified", install, series, lines, manifest)
        # All pristine again: the state is stale (torch was reinstalled).
    lines = []
    kinds = set()
    for rel in series.touched:
        if rel not in install.record:
            raise Refused(f"{rel} is not in torch {install.version}'s RECORD")
        digest = record_digest(install.read(rel)) if install.path(rel).is_file() else ""
        kind = "pristine" if digest == install.record[rel] else "modified"
        kinds.add(kind)
        lines.append(f"  {kind:<9} {rel}")
    if kinds == {"pristine"}:
        if series.adds_feature and has_feature(install.read(config_rel)):
            return Status("has-feature", install, series, lines, manifest)
        return Status("pristine", install, series, lines, manifest)
    return Status("modified", install, series, lines, manifest)


def atomic_write(target: Path, data: bytes, mode: int) -> None:
    tmp = target.with_name(f".{target.name}.pregrad-tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, mode)
    os.replace(tmp, target)


def restore_pristine(install: Install, manifest: dict) -> List[str]:
    """Put every file the manifest names back to the wheel's bytes, from the backups."""
    restored: List[str] = []
    backups = install.state_dir / "orig"
    for rel in sorted(manifest["pristine"]):
        target = install.path(rel)
        if target.is_file() and record_digest(target.read_bytes()) == install.record[rel]:
            continue
        backup = backups / rel
        data = backup.read_bytes() if backup.is_file() else b""
        if record_digest(data) != install.record[rel]:
            raise Refused(
                f"the backup of {rel} in {backups} does not match torch's RECORD; "
                f"reinstall torch ({reinstall_command(install)})"
            )
        atomic_write(target, data, manifest["modes"].get(rel, 0o644))
        restored.append(rel)
    return restored


def reinstall_command(install: Install) -> str:
    return f"{sys.executable} -m pip install --force-reinstall --no-deps torch=={install.version}"


def drop_state(install: Install) -> None:
    shutil.rmtree(install.state_dir)


def remove_partial_writes(install: Install, paths: List[str]) -> None:
    """Temporary files that a killed atomic_write left beside its target."""
    for rel in paths:
        tmp = install.path(rel).with_name(f".{install.path(rel).name}.pregrad-tmp")
        if tmp.exists():
            tmp.unlink()


def recover(status: Status, check: bool) -> int:
    assert status.series is not None and status.manifest is not None
    if check:
        print(f"would roll back the interrupted {status.manifest.get('state')} run "
              "and restore the wheel's files")
        return 0
    restored = restore_pristine(status.install, status.manifest)
    remove_partial_writes(status.install, sorted(status.manifest["pristine"]))
    drop_state(status.install)
    what = ("finished an interrupted revert" if status.manifest.get("state") == "reverting"
            else f"rolled back an interrupted {status.manifest.get('state')} run")
    print(f"{what}: restored {len(restored)} file(s) to the wheel's bytes")
    return 0


def cmd_status(install: Install) -> int:
    status = inspect(install)
    print(status.headline())
    for line in status.lines:
        print(line)
    messages = {
        "pristine": "pristine: every file the series touches matches torch's RECORD",
        "patched": "patched: the series is applied (revert with --revert)",
        "modified": "modified: files differ from both the wheel and the series"
        + OVERLAY_HINT,
        "outdated": "outdated: an earlier version of the series is applied; "
        "apply replaces it, --revert removes it",
        "interrupted": "interrupted: an earlier run stopped part-way; "
        "--revert or the next apply rolls it back",
        "has-feature": "has the feature: torch._inductor.config.pre_grad_pass_timing "
        "already exists; nothing to apply"
        + ("" if status.series else NO_FIXES_NOTE),
        "unsupported": "unsupported: no series for this version; supported bases: "
        + ", ".join(supported_bases()),
    }
    print(messages[status.state])
    return 0 if status.state in ("pristine", "patched", "has-feature") else 1


def refuse_unless_applicable(status: Status) -> None:
    if status.state == "unsupported":
        raise Refused(
            f"torch {status.install.version} is not a supported base "
            f"(supported: {', '.join(supported_bases())}); nothing was changed"
        )
    if status.state == "modified":
        what = ("the series is applied, but these files changed since"
                if status.manifest is not None else "these files differ from torch's RECORD")
        raise Refused(
            f"{what}, so nothing was changed:\n"
            + "\n".join(f"  {status.install.site / rel}" for rel in modified_files(status))
            + f"\nreinstall torch ({reinstall_command(status.install)}"
            f") or undo the local edits"
            + OVERLAY_HINT
        )


NO_FIXES_NOTE = ("\nnote: this project's results fixes (see README, patch ledger) exist "
                 "only for the supported bases: " + ", ".join(supported_bases()))


OVERLAY_HINT = ("\n(a copied overlay also shows as modified: it keeps no backups; "
                "check it with sha256sum -c overlay/SHA256SUMS)")


def modified_files(status: Status) -> List[str]:
    return [line.split()[-1] for line in status.lines if line.split()[0] == "modified"]


def cmd_apply(install: Install, check: bool) -> int:
    status = inspect(install)
    print(status.headline())
    if status.state == "interrupted":
        recover(status, check)
        if check:
            print("then would apply the series")
            return 0
        status = inspect(install)
    if status.state == "patched":
        print("already applied: nothing to do")
        return 0
    if status.state == "has-feature":
        print("torch._inductor.config.pre_grad_pass_timing already exists in this "
              "torch: it has the feature, nothing to do"
              + ("" if status.series else NO_FIXES_NOTE))
        return 0
    if status.state != "outdated":
        refuse_unless_applicable(status)
    series = status.series
    assert series is not None
    # An earlier series' originals are in its backups; build the new files
    # from those before anything is written, so a failure changes nothing.
    backups = status.manifest["pristine"] if status.state == "outdated" and status.manifest else {}
    pristine = {rel: (install.state_dir / "orig" / rel).read_bytes() if rel in backups
                else install.read(rel) for rel in series.touched}
    patched = apply_series(pristine, series)
    if status.state == "outdated":
        if check:
            print("an earlier version of the series is applied: would replace it")
        else:
            assert status.manifest is not None
            restore_pristine(install, status.manifest)
            drop_state(install)
            print("an earlier version of the series was applied: restored the wheel's "
                  "files, now applying this one")
    elif status.manifest is not None and not check:
        drop_state(install)  # left by an earlier install of torch that was replaced
    if check:
        for rel in series.touched:
            print(f"  would patch {rel}")
        print(f"check: the series applies cleanly; {len(series.touched)} file(s) "
              "would change, nothing was written")
        return 0
    write_backups(install, series, pristine, patched)
    try:
        kill_after = int(os.environ.get(KILL_AFTER_ENV, "-1"))
        for done, rel in enumerate(series.touched):
            if done == kill_after:
                os._exit(137)
            atomic_write(install.path(rel), patched[rel],
                         install.path(rel).stat().st_mode & 0o7777)
            print(f"  patched {rel}")
        manifest = read_manifest(install)
        assert manifest is not None
        manifest["state"] = "applied"
        atomic_write(install.state_dir / MANIFEST,
                     json.dumps(manifest, indent=2).encode(), 0o644)
    except BaseException:
        manifest = read_manifest(install)
        assert manifest is not None
        restore_pristine(install, manifest)
        drop_state(install)
        print("failed part-way: every file was restored to the wheel's bytes",
              file=sys.stderr)
        raise
    print(f"applied {len(series.patches)} patches to {len(series.touched)} files; "
          f"originals kept in {install.state_dir}")
    return 0


def write_backups(install: Install, series: Series,
                  pristine: Dict[str, bytes], patched: Dict[str, bytes]) -> None:
    """Write backups and manifest into a temporary dir, then rename it into place,
    so the state dir is either complete or absent."""
    staging = install.site / (STATE_DIRNAME + ".staging")
    if staging.exists():
        shutil.rmtree(staging)
    for rel, data in pristine.items():
        (staging / "orig" / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / "orig" / rel).write_bytes(data)
    manifest = {
        "state": "applying",
        "torch": install.version,
        "base": series.base,
        "series": {p.name: sha256_hex(p.read_bytes()) for p in series.patches},
        "pristine": {rel: install.record[rel] for rel in series.touched},
        "patched": {rel: record_digest(data) for rel, data in patched.items()},
        "modes": {rel: install.path(rel).stat().st_mode & 0o7777 for rel in series.touched},
    }
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
    os.replace(staging, install.state_dir)


def cmd_revert(install: Install, check: bool) -> int:
    status = inspect(install)
    print(status.headline())
    if status.state == "interrupted":
        return recover(status, check)
    if status.state in ("pristine", "has-feature", "unsupported"):
        if status.manifest is not None and status.state == "pristine" and not check:
            drop_state(install)  # stale state from an install that was replaced
        elif status.manifest is not None:
            print(f"note: {install.state_dir} holds backups of an earlier apply to a "
                  f"different torch; left alone")
        print(f"nothing to revert: {status.state}")
        return 0
    if status.state == "modified":
        if status.manifest is None:
            raise Refused(
                "nothing to revert: the series was not applied by this script (no "
                f"backups in {install.state_dir}), and these files differ from torch's "
                "RECORD:\n" + "\n".join(f"  {install.site / rel}" for rel in modified_files(status))
                + f"\nreinstall torch ({reinstall_command(install)}"
                f") to get the wheel's files back"
                + OVERLAY_HINT
            )
        raise Refused(
            "these files changed after the series was applied, so nothing was "
            "reverted:\n" + "\n".join(f"  {install.site / rel}" for rel in modified_files(status))
            + f"\nreinstall torch ({reinstall_command(install)}"
            f") to get the wheel's files back"
        )
    assert status.series is not None and status.manifest is not None
    if check:
        for rel in sorted(status.manifest["pristine"]):
            print(f"  would restore {rel}")
        print("check: nothing was written")
        return 0
    manifest = dict(status.manifest, state="reverting")
    atomic_write(install.state_dir / MANIFEST, json.dumps(manifest, indent=2).encode(), 0o644)
    restored = restore_pristine(install, manifest)
    for rel in restored:
        print(f"  restored {rel}")
    drop_state(install)
    after = inspect(install)
    if after.state != "pristine":
        raise Refused("after the revert the files still differ from RECORD:\n"
                      + "\n".join(after.lines))
    print(f"reverted: {len(restored)} file(s) are byte-identical to torch's RECORD again")
    return 0


# --------------------------------------------------------------------------
# The overlay: the patched files of a base, generated from pristine sources


def pristine_from_install(series: Series) -> Dict[str, bytes]:
    install = find_install()
    if base_for_version(install.version) != series.base:
        raise Refused(f"{sys.executable} has torch {install.version}, not {series.version}")
    status = inspect(install)
    if status.state == "pristine":
        return {rel: install.read(rel) for rel in series.touched}
    if status.state == "patched":
        return {rel: (install.state_dir / "orig" / rel).read_bytes() for rel in series.touched}
    raise Refused(f"torch in {install.site} is {status.state}; need pristine or patched files")


def pristine_from_wheel(series: Series, cache: Path) -> Dict[str, bytes]:
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    candidates = wheel_files(wheels, series.version)
    if not candidates:
        print(f"downloading the torch {series.version} wheel into {wheels} "
              "(about 530 MB; pip shows progress) ...", file=sys.stderr, flush=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--python-version", f"{sys.version_info.major}.{sys.version_info.minor}",
             "-d", str(wheels), f"torch=={series.version}"],
            check=True,
        )
        candidates = wheel_files(wheels, series.version)
    if not candidates:
        raise Refused(f"pip did not produce a torch {series.version} wheel in {wheels}")
    with zipfile.ZipFile(candidates[0]) as wheel:
        # A local build tag (2.13.0+cpu) names the dist-info directory too.
        record_name = next(name for name in wheel.namelist()
                           if re.fullmatch(r"torch-[^/]+\.dist-info/RECORD", name))
        record: Dict[str, str] = {}
        for line in wheel.read(record_name).decode().splitlines():
            path, digest, _size = line.rsplit(",", 2)
            if digest.startswith("sha256="):
                record[path] = digest[len("sha256="):]
        files = {rel: wheel.read(rel) for rel in series.touched}
    for rel, data in files.items():
        if record_digest(data) != record.get(rel):
            raise Refused(f"{candidates[0]}: {rel} does not match the wheel's RECORD")
    return files


def wheel_files(wheels: Path, version: str) -> List[Path]:
    """Cached wheels of torch `version`, with or without a local build tag."""
    return sorted([*wheels.glob(f"torch-{version}-*.whl"),
                   *wheels.glob(f"torch-{version}+*.whl")])


def cmd_overlay(base: str, out: Path, from_install: bool, cache: Path) -> int:
    series = load_series(base)
    if from_install:
        pristine = pristine_from_install(series)
        source = f"installed torch of {sys.executable}"
    else:
        pristine = pristine_from_wheel(series, cache)
        source = f"torch {series.version} wheel from the package index"
    for rel, data in pristine.items():
        expected = expected_pristine(series).get(rel)
        if expected is not None and sha256_hex(data) != expected:
            raise Refused(f"{rel} from the {source} differs from {series.directory}/pristine.tsv")
    patched = apply_series(pristine, series)
    out.mkdir(parents=True, exist_ok=True)
    previous = previous_overlay_files(out)
    staging = Path(tempfile.mkdtemp(prefix=".overlay-", dir=out))
    try:
        for rel, data in patched.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_bytes(data)
        sums = "".join(f"{sha256_hex(patched[rel])}  {rel}\n" for rel in series.touched)
        (staging / "SHA256SUMS").write_text(sums)
        stamp = [f"base: {series.base}", f"source: {source}", "series:"]
        stamp += [f"  {sha256_hex(p.read_bytes())}  {shown(p.path)}" for p in series.patches]
        stamp += ["pristine:"]
        stamp += [f"  {sha256_hex(pristine[rel])}  {rel}" for rel in series.touched]
        stamp += ["patched (also in SHA256SUMS):"]
        stamp += [f"  {sha256_hex(patched[rel])}  {rel}" for rel in series.touched]
        (staging / "STAMP").write_text("\n".join(stamp) + "\n")
        for rel in previous:
            (out / rel).unlink()
        for directory in sorted({(out / rel).parent for rel in previous}, reverse=True):
            while directory != out and directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()
                directory = directory.parent
        for rel in [*series.touched, "SHA256SUMS", "STAMP"]:
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, out / rel)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    for rel in series.touched:
        print(f"  {out / rel}")
    print(f"overlay for {series.base} written to {out} (verify: cd {out} && sha256sum -c SHA256SUMS)")
    return 0


def previous_overlay_files(out: Path) -> List[str]:
    """The files of an overlay generated here before, which may be replaced.
    Anything else in `out` (an installed torch, say) makes us refuse."""
    sums = out / "SHA256SUMS"
    listed = [line.split("  ", 1)[1] for line in sums.read_text().splitlines()
              if "  " in line] if sums.is_file() and (out / "STAMP").is_file() else []
    ours = set(listed) | ({"SHA256SUMS", "STAMP"} if listed else set()) | {"README.md"}
    foreign = [str(path.relative_to(out)) for path in sorted(out.rglob("*"))
               if path.is_file() and str(path.relative_to(out)) not in ours
               and not path.relative_to(out).parts[0].startswith(".overlay-")]
    if foreign:
        raise Refused(
            f"{out} holds files that this script did not generate (e.g. {foreign[0]}, "
            f"{len(foreign)} in all); nothing was written. Name an empty or new "
            "directory, or one holding an earlier overlay"
        )
    return [rel for rel in listed if (out / rel).is_file()]


def expected_pristine(series: Series) -> Dict[str, str]:
    return {path: row[1] for path, row in pristine_table(series).items()}


def expected_pristine_blobs(series: Series) -> Dict[str, str]:
    return {path: row[0] for path, row in pristine_table(series).items()}


@contextlib.contextmanager
def locked(install: Install) -> Iterator[None]:
    """One apply or revert at a time per install: an flock on site-packages."""
    handle = os.open(install.site, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for another apply.sh run on {install.site} ...",
                  file=sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="apply.sh", add_help=False)
    parser.add_argument("command", choices=["apply", "revert", "status", "overlay"])
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--base")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--from-install", action="store_true")
    parser.add_argument("--cache", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "overlay":
            return cmd_overlay(args.base, args.out, args.from_install, args.cache)
        install = find_install()
        if args.command == "status":
            return cmd_status(install)
        with locked(install):
            if args.command == "apply":
                return cmd_apply(install, args.check)
            return cmd_revert(install, args.check)
    except Refused as problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: any file already written was restored; "
              "--status tells where the install stands", file=sys.stderr)
        return 130
    except PermissionError as problem:
        after = ("any file already written was restored" if args.command == "apply"
                 else "the revert stopped part-way; rerun --revert once it can write "
                 "(--status shows where the install stands)")
        print(f"error: {problem}; {after}. Run as the owner of the install.",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
