"""Usage: scripts/venv.sh VERSION [NAME]
       scripts/venv.sh VERSION --patched-copy NAME [-- APPLY_ARGS...]
       scripts/venv.sh --help
(scripts/venv.sh runs `python3 test/harness/venvs.py`; the matrix,
test/harness/matrix.py, calls its functions.)

Makes sure a virtual environment with torch==VERSION, the test
requirements (requirements/test.txt), the torchao release that
test/torchao.tsv pins for VERSION and the torchvision release that
test/torchvision.tsv pins for it (pip install --no-deps; none where the file
says "none") exists at $PREGRAD_CACHE/venvs/NAME (NAME defaults to
torch-VERSION) and prints the path of its python as the last line of
output. An environment that finished installing is reused; one whose
install was interrupted is rebuilt; one made with other test requirements
or another torchao or torchvision pin gets those, keeping its torch (the
ready stamp names all four). The first install downloads about 4.6 GB (torch and its
CUDA libraries; they run on the CPU too) into $PREGRAD_CACHE/wheelhouse
(`pip download`, then `pip install --no-index --find-links` from there), so
that a wheel two venvs share is downloaded once; the release's torch wheel
leaves the wheelhouse once its venv is ready. Files of 1 MB or more that
another venv under $PREGRAD_CACHE/venvs holds byte for byte are then
hard-linked to it (util-linux's hardlink, if
present): ten releases, with their patched copies, take about 32 GB.

--patched-copy NAME makes sure the stock venv torch-VERSION exists, then
makes NAME afresh as a hard-linked copy of it (a few MB, under a second)
and applies the series to the copy with scripts/apply.sh, which replaces
files by atomic rename: the stock venv keeps its bytes. Arguments after
`--` go to apply.sh (e.g. `-- --topic pre-grad-pass-timing --topic
cpu-isa-probe`); without them apply.sh applies the default topics.

Environment: PREGRAD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pregrad-backport),
PYTHON (default python3): the interpreter the venv is made from.
Exit codes: 0 ready; 1 install failed; 2 usage error.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, TextIO, Union

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from torch_backport.download import pip_config  # noqa: E402  (the one reader of pip's settings)
from torch_backport.infra.fsio import cache_dir  # noqa: E402  (the one cache path)

REQUIREMENTS = REPO / "requirements" / "test.txt"
TORCHAO_PINS = REPO / "test" / "torchao.tsv"
TORCHVISION_PINS = REPO / "test" / "torchvision.tsv"
APPLY = REPO / "scripts" / "apply.sh"
QUIET_PIP = ("-m", "pip", "--disable-pip-version-check")


class InstallFailed(Exception):
    """pip (or the copy, or apply.sh) failed; the message says which. Exit 1."""


@dataclass(frozen=True)
class Pin:
    """A distribution's version for one torch release, from a test/*.tsv table."""
    version: str  # "none": the distribution is not installed at all
    reason: str


def pinned(table: Path, release: str) -> Pin:
    """The row of `table` (release<TAB>version<TAB>reason) for `release`;
    "none" when the table has no row for it."""
    for line in table.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = line.split("\t")
        if fields[0] == release:
            return Pin(fields[1] if len(fields) > 1 else "none",
                       fields[2] if len(fields) > 2 else "")
    return Pin("none", "")


def ready_stamp(version: str) -> str:
    """What .pregrad-ready holds once a venv finished installing; the format
    scripts/venv.sh wrote, so that the venvs it made are reused as they are."""
    requirements = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    return (f"torch=={version} {requirements} "
            f"torchao=={pinned(TORCHAO_PINS, version).version} "
            f"torchvision=={pinned(TORCHVISION_PINS, version).version}")


def venvs_dir() -> Path:
    return cache_dir() / "venvs"


def python_of(venv: Path) -> Path:
    return venv / "bin" / "python"


def is_ready(venv: Path, version: str) -> bool:
    """Whether `venv` finished installing what this checkout wants for `version`."""
    ready = venv / ".pregrad-ready"
    return ready.is_file() and ready.read_text().rstrip("\n") == ready_stamp(version)


@contextlib.contextmanager
def locked(venv: Path) -> Iterator[None]:
    """flock on <venv>.lock: two runs building the same venv would corrupt
    it. The same lock file and kind as scripts/venv.sh took, so the two wait
    for each other."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def run_into(log: TextIO, argv: Sequence[Union[str, Path]],
             env: Optional[Dict[str, str]] = None) -> bool:
    """Run `argv` with its output into `log`; whether it succeeded."""
    log.flush()  # our own lines first, then the command's
    return subprocess.run([str(arg) for arg in argv], stdout=log, stderr=log,
                          env=env).returncode == 0


def base_interpreter() -> str:
    return os.environ.get("PYTHON", "python3")


def interpreter_of(minor: str) -> str:
    """CPython `minor` (e.g. 3.10): pyenv's, else python3.10 on PATH (a
    pyenv shim is not one: it fails for a version not selected)."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    installed = root.glob(f"versions/{minor}.*/bin/python{minor}")
    # The newest patch release: 3.10.13 before 3.10.9, by number, not by text.
    newest = max(installed, key=lambda path: [int(part) for part in
                                              path.parts[-3].split(".") if part.isdigit()],
                 default=None)
    if newest is not None:
        return str(newest)
    found = shutil.which(f"python{minor}")
    if found and "shims" not in Path(found).parts:
        return found
    raise InstallFailed(f"venv: no Python {minor}: neither {root}/versions/{minor}.*/ "
                        f"(pyenv install {minor}) nor python{minor} on PATH")


def lift_configured_constraint(env: Dict[str, str], version: str, log: TextIO) -> None:
    """pip's own configuration may cap torch below the release asked for
    (these build machines: /etc/xdg/pip/constraints.txt, torch<=2.14.1, which
    would refuse 2.15.0); a user's machine has no such cap. Every install
    here pins its versions itself, so a configured constraint is lifted for
    these pip commands only (in `env`), and said."""
    if env.get("PIP_CONSTRAINT"):
        return
    found = pip_config.options(base_interpreter(), dict(os.environ)).get("constraint")
    if not found:
        return
    configured = Path(found)
    try:
        caps = " ".join(line for line in configured.read_text().splitlines()
                        if line.strip() and not line.startswith("#"))
    except OSError:
        caps = ""
    print(f"venv: lifting pip's configured constraint {configured} ({caps}) for these "
          f"installs (PIP_CONSTRAINT=/dev/null): torch=={version} is pinned here", file=log)
    env["PIP_CONSTRAINT"] = "/dev/null"


def wheelhouse() -> Path:
    """Every wheel the venvs install, downloaded once: pip's own cache keeps
    nothing of this index's replies (they are not cacheable), and the ten
    releases share most of their CUDA wheels."""
    return cache_dir() / "wheelhouse"


def install_from_wheelhouse(python: Path, requirements: Sequence[Union[str, Path]],
                            env: Dict[str, str], log: TextIO, no_deps: bool = False) -> bool:
    """`pip download` into the wheelhouse (a file already there is not
    downloaded again), then `pip install` from it alone: the same resolution
    as a plain install, each wheel fetched once for all the venvs."""
    deps = ["--no-deps"] if no_deps else []
    return (run_into(log, [python, *QUIET_PIP, "download", *deps, "-d", wheelhouse(),
                           *requirements], env)
            and run_into(log, [python, *QUIET_PIP, "install", *deps, "--no-index",
                               "--find-links", wheelhouse(), *requirements], env))


def seed_release_wheel(version: str, log: TextIO, python: Optional[str] = None) -> None:
    """The release wheel of torch `version` that the venv (of CPython
    `python`, 3.10; default the matrix's own) was installed from, hard-linked
    into the tool's own release-wheel cache (<cache>/wheels/, where `apply.sh
    --wheel` looks first): downloaded once for both."""
    from torch_backport.download.release_wheels import Target, cached

    target = Target.host() if python is None else Target(None, python)
    if cached(version, target, cache_dir()) is not None:
        return
    for wheel in sorted(wheelhouse().glob(f"torch-{version}-{target.python_tag}-*.whl")):
        folder = cache_dir() / "wheels" / target.folder
        folder.mkdir(parents=True, exist_ok=True)
        try:
            os.link(wheel, folder / wheel.name)
        except OSError:
            shutil.copy2(wheel, folder / wheel.name)
        print(f"venv: {wheel.name} from the wheelhouse into {folder}", file=log)
        return


def drop_wheelhouse(log: TextIO) -> None:
    """Once every venv of a run is set up: the wheelhouse held what they
    share only (each torch wheel left it with its venv), 9 GB or more that
    no venv reads; a venv made later downloads what it needs again."""
    if wheelhouse().is_dir():
        print(f"venv: removing {wheelhouse()} ({megabytes(wheelhouse())} MB): every venv "
              "is set up", file=log)
        shutil.rmtree(wheelhouse(), ignore_errors=True)


def install_pins(python: Path, version: str, env: Dict[str, str], log: TextIO) -> bool:
    """torchao and torchvision as test/*.tsv pin them, --no-deps so that they
    can never move torch (torchao publishes no torch requirement); where a pin
    is "none", no such distribution at all."""
    wanted: List[str] = []
    for dist, table in (("torchao", TORCHAO_PINS), ("torchvision", TORCHVISION_PINS)):
        pin = pinned(table, version)
        if pin.version != "none":
            wanted.append(f"{dist}=={pin.version}")
        elif subprocess.run([str(python), "-m", "pip", "show", dist],
                            capture_output=True).returncode == 0:
            if not run_into(log, [python, *QUIET_PIP, "uninstall", "-y", dist], env):
                return False
    # Both pins in one `pip download` and one `pip install`: two pip starts a venv fewer.
    return not wanted or install_from_wheelhouse(python, wanted, env, log, no_deps=True)


def update_in_place(venv: Path, version: str, env: Dict[str, str], log: TextIO) -> bool:
    """Same torch, other test requirements or pins: install those and keep
    the 4.6 GB. Whether that worked."""
    print(f"venv: updating the test requirements, torchao "
          f"({pinned(TORCHAO_PINS, version).version}) and torchvision "
          f"({pinned(TORCHVISION_PINS, version).version}) in {venv}", file=log)
    lift_configured_constraint(env, version, log)
    (venv / ".pregrad-ready").unlink()
    python = python_of(venv)
    return (install_from_wheelhouse(python, ["-r", REQUIREMENTS], env, log)
            and install_pins(python, version, env, log))


def create(venv: Path, version: str, env: Dict[str, str], log: TextIO,
           keep_release_wheel: bool = False, interpreter: Optional[str] = None) -> None:
    """A new venv with torch==version, the test requirements and the pins,
    made by `interpreter` (default: $PYTHON or python3). Its torch wheel
    leaves the wheelhouse after (no other venv installs it; with
    `keep_release_wheel`, into the tool's release-wheel cache)."""
    started = time.monotonic()
    base = interpreter or base_interpreter()
    lift_configured_constraint(env, version, log)
    print(f"venv: creating {venv} (torch=={version}, {base})", file=log)
    shutil.rmtree(venv, ignore_errors=True)
    if not run_into(log, [base, "-m", "venv", venv], env):
        raise InstallFailed(f"venv: could not create {venv} with {base}")
    print(f"venv: installing torch=={version}, the test requirements, torchao "
          f"({pinned(TORCHAO_PINS, version).version}) and torchvision "
          f"({pinned(TORCHVISION_PINS, version).version}); the first time downloads "
          "~4.6 GB ...", file=log)
    python = python_of(venv)
    # pip prints one line per download; its progress bar shows on a terminal.
    if not (install_from_wheelhouse(python, [f"torch=={version}", "-r", REQUIREMENTS],
                                    env, log)
            and install_pins(python, version, env, log)):
        raise InstallFailed(f"venv: pip failed installing torch=={version} into {venv}; "
                            "rerun to retry")
    (venv / ".pregrad-ready").write_text(ready_stamp(version) + "\n")
    if keep_release_wheel:
        seed_release_wheel(version, log)
    for wheel in wheelhouse().glob(f"torch-{version}[-+]*.whl"):
        wheel.unlink()
    print(f"venv: ready after {round(time.monotonic() - started)} s", file=log)


def ensure_venv(version: str, name: Optional[str] = None, log: TextIO = sys.stderr,
                keep_release_wheel: bool = False, interpreter: Optional[str] = None) -> Path:
    """The python of the venv NAME (default torch-VERSION), made or brought
    up to date first if it is not ready (`keep_release_wheel`,
    `interpreter`: see create)."""
    venv = venvs_dir() / (name or f"torch-{version}")
    env = dict(os.environ)
    with locked(venv):
        ready = venv / ".pregrad-ready"
        if is_ready(venv, version):
            print(f"venv: reusing {venv}", file=log)
            return python_of(venv)
        if ready.is_file() and ready.read_text().rstrip("\n").split(" ")[0] == f"torch=={version}":
            if update_in_place(venv, version, env, log):
                ready.write_text(ready_stamp(version) + "\n")
                return python_of(venv)
            print(f"venv: updating failed; rebuilding {venv}", file=log)
        create(venv, version, env, log, keep_release_wheel, interpreter)
        share_identical_files(log)
    return python_of(venv)


def megabytes(directory: Path) -> str:
    used = subprocess.run(["du", "-sm", str(directory)], capture_output=True, text=True)
    return used.stdout.split("\t", 1)[0] or "?"


def share_identical_files(log: TextIO) -> None:
    """Releases share most of their 4.6 GB (the CUDA libraries), byte for
    byte: one copy on disk. apply.sh replaces files by rename, never in
    place, so a shared file is never changed under another venv."""
    directory = venvs_dir()
    if shutil.which("hardlink") is None:
        print("venv: util-linux's hardlink is missing, so venvs keep their own copies of "
              "shared files", file=log)
        return
    before = megabytes(directory)
    if not run_into(log, ["hardlink", "--ignore-time", "--ignore-owner", "--minimum-size",
                          "1M", "--quiet", directory]):
        print("venv: hardlink failed; the venvs keep their own copies", file=log)
    print(f"venv: hard-linked files shared with other venvs: {before} MB -> "
          f"{megabytes(directory)} MB in {directory}", file=log)


def patched_copy(version: str, name: str, apply_args: List[str],
                 log: TextIO = sys.stderr, stock_name: Optional[str] = None,
                 interpreter: Optional[str] = None) -> Path:
    """NAME afresh as a hard-linked copy (`cp -al`: a few MB) of the stock
    venv of `version` (STOCK_NAME, made by `interpreter`: see ensure_venv),
    with `apply.sh --python COPY APPLY_ARGS` run on it; the python of the
    copy."""
    stock_venv = ensure_venv(version, stock_name, log=log,
                             interpreter=interpreter).parent.parent
    copy = venvs_dir() / name
    with locked(copy):
        shutil.rmtree(copy, ignore_errors=True)
        if not run_into(log, ["cp", "-al", stock_venv, copy]):
            raise InstallFailed(f"venv: could not copy {stock_venv} to {copy}")
        if not run_into(log, [APPLY, "--python", python_of(copy), *apply_args]):
            raise InstallFailed(f"venv: apply.sh --python {python_of(copy)} "
                                f"{' '.join(apply_args)} failed")
    return python_of(copy)


def main(argv: List[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    patched = argv[1:2] == ["--patched-copy"]
    if not argv or (patched and not (len(argv) == 3 or argv[3:4] == ["--"])) or (
            not patched and len(argv) > 2):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        if patched:
            python = patched_copy(argv[0], argv[2], argv[4:])
        else:
            python = ensure_venv(argv[0], argv[1] if len(argv) > 1 else None)
    except InstallFailed as failure:
        print(failure, file=sys.stderr)
        return 1
    print(python)
    return 0


if __name__ == "__main__":
    # Output piped into `head` ends quietly, as a shell command's does.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
