"""The fleet's index served over HTTP, as a team serves it (docs/usage.md,
"Serving the index"): DIR, the fleet's output for a small fake torch 2.11.0
wheel (cp311 manylinux_2_28_x86_64, `Requires-Python: >=3.10`), served by
nginx (Debian's package, started here on 127.0.0.1 with a configuration of
its own; it honours Range) and by `python3 -m http.server` (which does not),
each writing an access log. Against both:

- pip (a current one, and this venv's older one), `uv lock` and `poetry
  lock` resolve `torch==2.11.0` to the patched wheel and pin it by sha256
  (pip's --report, uv.lock, poetry.lock);
- with each wheel's `.metadata` on the index (PEP 658/714) they read that
  and never GET a whole wheel: on nginx every wheel GET, if any, carries a
  Range header, and on http.server there is none at all. (A pip older than
  23.3 downloads the wheel in --dry-run whatever the index offers; this
  venv's is checked for its pick only.)

nginx, uv (beside this python) or pip's index (for the venv below) missing,
a test skips, saying so; in the matrix, which installs nginx as it does
redis-server, that is an error (PREGRAD_REQUIRE_ALL=1, prerequisites.py).
The current pip and poetry (requirements/index-clients.txt) live in a venv
made once under $PREGRAD_CACHE/tools/, not in every test venv.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import unittest
import urllib.request
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, unquote

from fake_install import APPLY, source_python, STOCK
from fake_wheel import fleet_env, make_fake_wheel, release_files
from index_clients import clients_python
from prerequisites import missing

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK)
                                  else None)
PLATFORM = "manylinux_2_28_x86_64"
# pip resolves for the wheel's target whatever machine runs the test.
PIP_TARGET = ["--only-binary=:all:", "--implementation", "cp", "--platform", PLATFORM,
              "--python-version", "3.11"]
NGINX_CONF = """\
{user}daemon off;
worker_processes 1;
pid {run}/nginx.pid;
error_log {run}/error.log;
events {{ worker_connections 64; }}
http {{
    types {{ text/html html; }}
    default_type application/octet-stream;
    log_format pregrad '$request $status $body_bytes_sent "$http_range"';
    access_log {run}/access.log pregrad;
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        index index.html;
    }}
}}
"""
NGINX_LINE = re.compile(r'^(\S+) (\S+) \S+ (\d+) (\d+) "(.*)"$')
HTTP_SERVER_LINE = re.compile(r'"(\S+) (\S+) [^"]*" (\d+) \S+$')


@dataclasses.dataclass(frozen=True)
class Request:
    method: str
    path: str  # percent-decoded
    status: int
    ranged: bool  # the request carried a Range header (nginx logs it)
    sent: int  # body bytes sent (nginx logs them; 0 for http.server, which does not)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclasses.dataclass
class Server:
    """A static server of DIR on 127.0.0.1 with its access log; `since`
    gives the requests logged after the mark."""
    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    parse: Callable[[str], Request | None]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/simple/torch/", timeout=5):
                    return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"{self.name} did not start: "
                                         f"{self.log.read_text() if self.log.exists() else ''}")
                time.sleep(0.1)

    def mark(self) -> int:
        return self.log.stat().st_size

    def since(self, mark: int) -> list[Request]:
        with open(self.log, "rb") as log:
            log.seek(mark)
            lines = log.read().decode(errors="replace").splitlines()
        return [request for line in lines if (request := self.parse(line)) is not None]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def nginx_request(line: str) -> Request | None:
    found = NGINX_LINE.match(line)
    if found is None:
        return None
    return Request(found.group(1), unquote(found.group(2)), int(found.group(3)),
                   found.group(5) not in ("", "-"), int(found.group(4)))


def http_server_request(line: str) -> Request | None:
    found = HTTP_SERVER_LINE.search(line)
    if found is None:
        return None
    return Request(found.group(1), unquote(found.group(2)), int(found.group(3)), False, 0)


def start_nginx(root: Path, run: Path) -> Server:
    assert NGINX is not None
    run.mkdir(parents=True)
    port = free_port()
    # As root, nginx's workers would run as nobody, who cannot read the
    # scratch directory: they stay root (127.0.0.1 only, for the test's life).
    (run / "nginx.conf").write_text(NGINX_CONF.format(
        user="user root;\n" if os.geteuid() == 0 else "", run=run, port=port, root=root))
    (run / "access.log").touch()
    process = subprocess.Popen([NGINX, "-p", str(run), "-c", str(run / "nginx.conf"),
                                "-e", str(run / "error.log")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Server("nginx", process, port, run / "access.log", nginx_request)


def start_http_server(root: Path, run: Path) -> Server:
    run.mkdir(parents=True)
    port = free_port()
    log = open(run / "access.log", "wb")
    process = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                                "--directory", str(root), str(port)],
                               stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    return Server("http.server", process, port, run / "access.log", http_server_request)


def require_nginx() -> None:
    if NGINX is None:
        missing("needs nginx: install Debian's nginx (scripts/test.sh installs it when run "
                "as root)")


def require_uv() -> Path:
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        missing(f"needs uv beside {sys.executable} (requirements/test.txt pins it)")
    return uv


def clean_env(scratch: Path) -> dict[str, str]:
    """This environment without pip's, uv's and poetry's settings, each
    client's cache and configuration under `scratch`, so that the machine's
    index configuration plays no part and nothing is cached from a run before."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("PIP_", "UV_", "POETRY_"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_CACHE_DIR": "1",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "UV_CACHE_DIR": str(scratch / "uv-cache"),
            "UV_NO_PROGRESS": "1", "UV_PYTHON": sys.executable, "UV_PYTHON_DOWNLOADS": "never",
            "XDG_CONFIG_HOME": str(scratch / "config"), "XDG_CONFIG_DIRS": str(scratch / "config"),
            "POETRY_CACHE_DIR": str(scratch / "poetry-cache"),
            "POETRY_CONFIG_DIR": str(scratch / "poetry-config"),
            "POETRY_DATA_DIR": str(scratch / "poetry-data"),
            "PYTHON_KEYRING_BACKEND": "keyring.backends.null.Keyring"}


def project(directory: Path, simple: str) -> Path:
    """A project that takes torch==2.11.0 from `simple` only: uv's and
    poetry's recipes of docs/usage.md."""
    directory.mkdir(parents=True)
    (directory / "pyproject.toml").write_text(f"""\
[project]
name = "team"
version = "0"
requires-python = ">=3.11"
dependencies = ["torch==2.11.0"]

[[tool.uv.index]]
name = "pregrad"
url = "{simple}"
explicit = true

[tool.uv.sources]
torch = {{ index = "pregrad" }}

[tool.poetry]
package-mode = false

[[tool.poetry.source]]
name = "pregrad"
url = "{simple}"
priority = "explicit"

[tool.poetry.dependencies]
torch = {{ source = "pregrad" }}
""")
    return directory


def build_index(scratch: Path) -> Path:
    """DIR: the fleet's output for a fake 2.11.0 release wheel of cp311
    manylinux_2_28_x86_64."""
    links = scratch / "links"
    make_fake_wheel(links, release_files(source_python(STOCK)), "2.11.0",
                    tag=f"cp311-cp311-{PLATFORM}", requires_python=">=3.10")
    out = scratch / "dist"
    built = subprocess.run([str(APPLY), "--wheel", "torch==2.11.0", "--out", str(out),
                            "--platform", PLATFORM, "--python-version", "3.11"],
                           capture_output=True, text=True, env=fleet_env(scratch, links))
    if built.returncode != 0:
        raise AssertionError(f"the fleet failed: {built.stdout}{built.stderr}")
    return out


class IndexOverHttp(unittest.TestCase):
    out: Path
    scratch: Path
    wheel: Path
    digest: str
    servers: list[Server]

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        require_nginx()
        scratch = tempfile.TemporaryDirectory(prefix="pregrad-index-http-")
        cls.addClassCleanup(scratch.cleanup)
        cls.scratch = Path(scratch.name)
        cls.out = build_index(cls.scratch)
        (cls.wheel,) = cls.out.glob("*.whl")
        cls.digest = hashlib.sha256(cls.wheel.read_bytes()).hexdigest()
        cls.servers = []
        for start, name in ((start_nginx, "nginx"), (start_http_server, "http.server")):
            server = start(cls.out, cls.scratch / name)
            cls.addClassCleanup(server.stop)
            server.wait_ready()
            cls.servers.append(server)

    def each_server(self, resolve: Callable[[Server, Path, dict[str, str]], None],
                    tool: str) -> None:
        """`resolve` against each server in a subTest, in a fresh scratch
        directory with a clean environment; then its requests: the
        metadata read, no whole wheel fetched."""
        for server in self.servers:
            with self.subTest(server=server.name, tool=tool):
                scratch = Path(tempfile.mkdtemp(prefix=f"{tool}-", dir=self.scratch))
                mark = server.mark()
                resolve(server, scratch, clean_env(scratch))
                self.assert_metadata_only(server, server.since(mark))

    def assert_metadata_only(self, server: Server, requests: list[Request]) -> None:
        name = f"/{self.wheel.name}"
        shown = [f"{r.method} {r.path} {r.status}{' (range)' if r.ranged else ''}"
                 for r in requests]
        self.assertIn((name + ".metadata", 200),
                      [(r.path, r.status) for r in requests], shown)
        whole = [r for r in requests if r.path == name and r.method == "GET" and not r.ranged]
        self.assertEqual(whole, [], shown)
        if server.name == "http.server":  # no Range: any wheel GET would be whole
            self.assertEqual([r for r in requests if r.path.endswith(".whl")], [], shown)

    def wheel_url(self, server: Server) -> str:
        return f"{server.url}/{quote(self.wheel.name)}"

    def pip_report(self, python: Path, server: Server, scratch: Path,
                   env: dict[str, str]) -> dict[str, Any]:
        report = scratch / "report.json"
        resolved = subprocess.run(
            [str(python), "-m", "pip", "install", "--dry-run", "--no-deps",
             "--ignore-installed", "--quiet", "--report", str(report), "--index-url",
             f"{server.url}/simple", *PIP_TARGET, "--target", str(scratch / "target"),
             "torch==2.11.0"], capture_output=True, text=True, env=env)
        self.assertEqual(resolved.returncode, 0, resolved.stdout + resolved.stderr)
        (install,) = json.loads(report.read_text())["install"]
        return dict(install)

    def test_pip_picks_the_patched_wheel_by_its_metadata(self) -> None:
        python = clients_python()

        def resolve(server: Server, scratch: Path, env: dict[str, str]) -> None:
            install = self.pip_report(python, server, scratch, env)
            self.assertEqual(install["metadata"]["version"], self.wheel.name.split("-")[1])
            self.assertEqual(install["download_info"], {  # pinned by sha256
                "url": self.wheel_url(server),
                "archive_info": {"hash": f"sha256={self.digest}",
                                 "hashes": {"sha256": self.digest}}})

        self.each_server(resolve, "pip")

    def test_an_older_pip_picks_it_too(self) -> None:
        """This venv's pip (23.2 here): the page is still one it reads."""
        server = self.servers[0]
        scratch = Path(tempfile.mkdtemp(prefix="old-pip-", dir=self.scratch))
        install = self.pip_report(Path(sys.executable), server, scratch, clean_env(scratch))
        self.assertEqual(install["download_info"]["url"], self.wheel_url(server))

    def test_uv_lock_pins_the_patched_wheel_by_its_metadata(self) -> None:
        uv = require_uv()

        def resolve(server: Server, scratch: Path, env: dict[str, str]) -> None:
            where = project(scratch / "project", f"{server.url}/simple")
            locked = subprocess.run([str(uv), "lock", "--no-config"], cwd=where,
                                    capture_output=True, text=True, env=env)
            self.assertEqual(locked.returncode, 0, locked.stdout + locked.stderr)
            lock = tomllib.loads((where / "uv.lock").read_text())
            (torch,) = [p for p in lock["package"] if p["name"] == "torch"]
            self.assertEqual(torch["version"], self.wheel.name.split("-")[1])
            self.assertEqual(torch["source"], {"registry": f"{server.url}/simple"})
            self.assertEqual(torch["wheels"], [{"url": self.wheel_url(server),
                                                "hash": f"sha256:{self.digest}"}])

        self.each_server(resolve, "uv")

    def test_poetry_lock_pins_the_patched_wheel_by_its_metadata(self) -> None:
        poetry = clients_python().parent / "poetry"

        def resolve(server: Server, scratch: Path, env: dict[str, str]) -> None:
            where = project(scratch / "project", f"{server.url}/simple")
            locked = subprocess.run([str(poetry), "lock", "--no-interaction"], cwd=where,
                                    capture_output=True, text=True, env=env)
            self.assertEqual(locked.returncode, 0, locked.stdout + locked.stderr)
            lock = tomllib.loads((where / "poetry.lock").read_text())
            (torch,) = [p for p in lock["package"] if p["name"] == "torch"]
            self.assertEqual(torch["version"], self.wheel.name.split("-")[1])
            self.assertEqual(torch["files"], [{"file": self.wheel.name,
                                               "hash": f"sha256:{self.digest}"}])
            self.assertEqual(torch["source"], {"type": "legacy", "url": f"{server.url}/simple",
                                               "reference": "pregrad"})

        self.each_server(resolve, "poetry")


@unittest.skipUnless(os.environ.get("PREGRAD_PATCHED_WHEEL"),
                     "the uv-fleet job's real patched wheel (PREGRAD_PATCHED_WHEEL)")
class RealWheelOverHttp(unittest.TestCase):
    """The real patched 2.11.0 wheel (530 MB) that the matrix built, in an
    index served by nginx: pip and `uv lock` (torch's dependencies from
    PyPI) pick it, and the server sends them under 5 MB together."""

    def test_pip_and_uv_lock_take_under_5_mb_from_the_server(self) -> None:
        from torch_backport.generated.index import read_all, write_index
        require_nginx()
        wheel = Path(os.environ["PREGRAD_PATCHED_WHEEL"])
        scratch = Path(tempfile.mkdtemp(prefix="pregrad-index-real-"))
        self.addCleanup(shutil.rmtree, scratch)
        out = scratch / "dist"
        out.mkdir()
        try:
            os.link(wheel, out / wheel.name)
        except OSError:
            shutil.copyfile(wheel, out / wheel.name)
        write_index(out, read_all(out))
        server = start_nginx(out, scratch / "nginx")
        self.addCleanup(server.stop)
        server.wait_ready()
        mark = server.mark()
        env = clean_env(scratch)
        resolved = subprocess.run(
            [str(clients_python()), "-m", "pip", "install", "--dry-run", "--no-deps",
             "--ignore-installed", "--quiet", "--report", "-", "--index-url",
             f"{server.url}/simple", *PIP_TARGET, "--target", str(scratch / "target"),
             "torch==2.11.0"], capture_output=True, text=True, env=env)
        self.assertEqual(resolved.returncode, 0, resolved.stderr)
        (install,) = json.loads(resolved.stdout)["install"]
        self.assertEqual(install["download_info"]["url"], f"{server.url}/{quote(wheel.name)}")
        where = project(scratch / "project", f"{server.url}/simple")
        pyproject = where / "pyproject.toml"  # triton 3.6.0 requires Python <3.15
        pyproject.write_text(pyproject.read_text().replace('">=3.11"', '">=3.11,<3.15"'))
        locked = subprocess.run([str(require_uv()), "lock", "--no-config"],
                                cwd=where, capture_output=True, text=True, env=env)
        self.assertEqual(locked.returncode, 0, locked.stdout + locked.stderr)
        self.assertIn(f'url = "{server.url}/{quote(wheel.name)}"',
                      (where / "uv.lock").read_text())
        requests = server.since(mark)
        self.assertLess(sum(r.sent for r in requests), 5_000_000,
                        [f"{r.method} {r.path} {r.status} {r.sent}" for r in requests])


if __name__ == "__main__":
    unittest.main()
