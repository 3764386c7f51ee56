"""An index's credentials go to that index only (transport.py,
pip_config.py): a credentialed index on 127.0.0.1 that redirects its wheel
with each redirect code, to another host (127.0.0.2) or another port, sends
no Authorization there; credentials are matched by scheme, host and port;
an https index redirecting to http with credentials is not followed; and
`--overlay` through such an index exits 0 without the password reaching the
file host or the output."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from typing import Dict

from fake_install import APPLY, source_python, STOCK
from fake_wheel import make_fake_wheel, release_files
from local_servers import Answer, Running, Seen, Server, ranges, self_signed, simple_page

from torch_backport.download.pip_config import from_options, PipConfig
from torch_backport.download.transport import Transport, TransportError

CODES = (301, 302, 303, 307, 308)
USER, PASSWORD = "team", "s3cret-pw"
TOKEN = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
DATA = b"wheel bytes " * 100


def file_host(server: Server, seen: Seen) -> Answer:
    return ranges(DATA, seen.headers.get("Range"))


def redirecting_index(code: int, to: str) -> "object":
    def handler(server: Server, seen: Seen) -> Answer:
        if seen.headers.get("Authorization") != TOKEN:
            return 401, {"WWW-Authenticate": 'Basic realm="index"'}, b""
        return code, {"Location": f"{to}/files/torch.whl"}, b""
    return handler


def config_for(index: Server) -> PipConfig:
    return from_options({"index-url": f"{index.scheme}://{USER}:{PASSWORD}@{index.host}:"
                                      f"{index.port}/simple"})


class RedirectsTest(unittest.TestCase):
    def redirect(self, code: int, host: str) -> Dict[str, object]:
        with Running(file_host, host) as files, \
                Running(redirecting_index(code, files.base)) as index:  # type: ignore[arg-type]
            reply = Transport(config_for(index)).get(f"{index.base}/files/torch.whl", 1 << 20)
            return {"body": reply.body == DATA, "index": index.authorizations(),
                    "files": files.authorizations()}

    def test_each_redirect_code_to_another_host_sends_no_credentials(self) -> None:
        for code in CODES:
            with self.subTest(code=code):
                self.assertEqual(self.redirect(code, "127.0.0.2"),
                                 {"body": True, "index": [TOKEN], "files": []})

    def test_each_redirect_code_to_another_port_sends_no_credentials(self) -> None:
        for code in CODES:
            with self.subTest(code=code):
                self.assertEqual(self.redirect(code, "127.0.0.1"),
                                 {"body": True, "index": [TOKEN], "files": []})

    def test_https_index_redirecting_to_http_with_credentials_is_not_followed(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            cert, key = self_signed(Path(tmp))
            with Running(file_host, "127.0.0.2") as files, \
                    Running(redirecting_index(302, files.base),  # type: ignore[arg-type]
                            tls=(cert, key)) as index:
                config = PipConfig(**{**config_for(index).__dict__, "cert": str(cert)})
                with self.assertRaisesRegex(TransportError, "not followed to http"):
                    Transport(config).get(f"{index.base}/files/torch.whl", 1 << 20)
                self.assertEqual((index.authorizations(), files.seen), ([TOKEN], []))


class CredentialsByOriginTest(unittest.TestCase):
    def test_each_index_gets_its_own_credentials_by_port_and_scheme(self) -> None:
        config = from_options({"index-url": "https://team:one@127.0.0.1:8443/simple",
                               "extra-index-url": "http://other:two@127.0.0.1:9000/simple"})
        self.assertEqual([config.login_for("https://127.0.0.1:8443/torch/"),
                          config.login_for("http://127.0.0.1:9000/torch/"),
                          config.login_for("http://127.0.0.1:8443/torch/"),
                          config.login_for("https://127.0.0.1:9443/torch/")],
                         [("team", "one"), ("other", "two"), None, None])

    def test_two_indexes_on_one_origin_each_get_their_own_by_longest_path(self) -> None:
        with Running(file_host) as server:
            config = from_options({
                "index-url": f"http://a:one@{server.host}:{server.port}/team-a/simple",
                "extra-index-url": f"http://b:two@{server.host}:{server.port}/team-a/simple/b"})
            for path in ("/team-a/simple/torch/", "/team-a/simple/b/torch/", "/files/x.whl"):
                Transport(config).get(f"{server.base}{path}", 1 << 20)
            sent = server.authorizations()
        basic = {login: "Basic " + base64.b64encode(login.encode()).decode()
                 for login in ("a:one", "b:two")}
        # A file outside both paths gets the origin's first index's, as pip
        # reuses an origin's credentials for the files its pages link to.
        self.assertEqual(sent, [basic["a:one"], basic["b:two"], basic["a:one"]])

    def test_no_url_keeps_its_password(self) -> None:
        config = from_options({"index-url": "https://team:one@127.0.0.1:8443/simple"})
        self.assertEqual(config.index_urls, ("https://127.0.0.1:8443/simple",))

    def test_netrc_entry_goes_by_host_as_pip_sends_it(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            netrc = Path(tmp) / "netrc"
            netrc.write_text("machine 127.0.0.1 login n password p\n")
            netrc.chmod(0o600)
            before = os.environ.get("NETRC")
            os.environ["NETRC"] = str(netrc)
            try:
                config = from_options({})
                self.assertEqual([config.login_for("http://127.0.0.1:1/"),
                                  config.login_for("http://127.0.0.2:1/")], [("n", "p"), None])
            finally:
                os.environ.pop("NETRC") if before is None else os.environ.update(NETRC=before)


class OverlayThroughCredentialedIndexTest(unittest.TestCase):
    """The whole command: `--overlay v2.11.0` from an empty cache, the wheel
    listed by a credentialed index on 127.0.0.1 and served from 127.0.0.2."""

    def test_overlay_reads_by_range_and_the_file_host_sees_no_credentials(self) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            wheel = make_fake_wheel(root / "wheels", release_files(source_python(STOCK)),
                                    "2.11.0")
            data = wheel.read_bytes()

            def files_handler(server: Server, seen: Seen) -> Answer:
                return ranges(data, seen.headers.get("Range"))

            with Running(files_handler, "127.0.0.2") as files:
                def index_handler(server: Server, seen: Seen) -> Answer:
                    if seen.headers.get("Authorization") != TOKEN:
                        return 401, {"WWW-Authenticate": 'Basic realm="index"'}, b""
                    if seen.path.startswith("/simple/torch"):
                        page = simple_page([(wheel.name, f"/files/{wheel.name}")])
                        return 200, {"Content-Type": "application/vnd.pypi.simple.v1+json"}, page
                    return 307, {"Location": f"{files.base}/files/{wheel.name}"}, b""

                with Running(index_handler) as index:
                    shims = root / "bin"
                    shims.mkdir()
                    (shims / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
                    (shims / "python3").chmod(0o755)
                    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull,
                           "PIP_INDEX_URL": f"http://{USER}:{PASSWORD}@127.0.0.1:{index.port}"
                                            "/simple",
                           "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "",
                           "PREGRAD_CACHE": str(root / "cache"),
                           "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
                    done = subprocess.run([str(APPLY), "--overlay", "v2.11.0", "--out",
                                           str(root / "overlay")], capture_output=True,
                                          text=True, env=env, timeout=300)
        output = done.stdout + done.stderr
        self.assertEqual(done.returncode, 0, output)
        self.assertNotIn(PASSWORD, output)
        self.assertIn("received from the network", output)
        self.assertEqual(files.authorizations(), [])
        self.assertGreater(len(files.seen), 0)
        self.assertLessEqual(files.sent, len(data) + 65536)
        self.assertTrue(all(a == TOKEN for a in index.authorizations()))


if __name__ == "__main__":
    unittest.main()
