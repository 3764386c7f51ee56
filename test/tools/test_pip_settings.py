"""pip's transport settings are honoured by every request (transport.py):
`cert` (a private CA), `trusted-host` (no verification, as pip), and
`proxy` (requests go through it), on servers at 127.0.0.x."""

from __future__ import annotations

import os
import tempfile
import unittest
from pathlib import Path

from local_servers import Answer, Running, Seen, self_signed, Server

from torch_backport.download.pip_config import from_options
from torch_backport.download.transport import Transport, TransportError

PAGE = b"the simple page"


def page(server: Server, seen: Seen) -> Answer:
    return 200, {}, PAGE


class TlsSettingsTest(unittest.TestCase):
    def setUp(self) -> None:
        scratch = tempfile.TemporaryDirectory()
        self.addCleanup(scratch.cleanup)
        self.cert, self.key = self_signed(Path(scratch.name))

    def test_a_private_ca_is_refused_without_pips_cert(self) -> None:
        with Running(page, tls=(self.cert, self.key)) as server:
            with self.assertRaisesRegex(TransportError, "CERTIFICATE_VERIFY_FAILED"):
                Transport(from_options({})).get(f"{server.base}/simple/torch/", 1024)

    def test_pips_cert_is_the_trust_store(self) -> None:
        with Running(page, tls=(self.cert, self.key)) as server:
            reply = Transport(from_options({"cert": str(self.cert)})).get(
                f"{server.base}/simple/torch/", 1024)
        self.assertEqual(reply.body, PAGE)

    def test_a_trusted_host_is_not_verified_as_pip_does(self) -> None:
        with Running(page, tls=(self.cert, self.key)) as server:
            reply = Transport(from_options({"trusted-host": f"127.0.0.1:{server.port}"})).get(
                f"{server.base}/simple/torch/", 1024)
        self.assertEqual(reply.body, PAGE)


class ProxyTest(unittest.TestCase):
    def test_pips_proxy_carries_the_request(self) -> None:
        with Running(page, "127.0.0.2") as origin, Running(page) as proxy:
            reply = Transport(from_options({"proxy": proxy.base})).get(
                f"{origin.base}/simple/torch/", 1024)
        self.assertEqual((reply.body, [seen.path for seen in proxy.seen], origin.seen),
                         (PAGE, [f"{origin.base}/simple/torch/"], []))

    def test_a_proxy_without_a_scheme_is_refused_not_stripped_of_its_login(self) -> None:
        with Running(page, "127.0.0.2") as origin, Running(page) as proxy:
            transport = Transport(from_options(
                {"proxy": f"user:pw@{proxy.host}:{proxy.port}"}))
            with self.assertRaises(TransportError) as refused:
                transport.get(f"{origin.base}/simple/torch/", 1024)
        self.assertEqual(str(refused.exception),
                         f"the proxy {proxy.host}:{proxy.port} has no scheme; write it as "
                         "http://HOST:PORT (with USER:PASSWORD@ before HOST if it needs them)")
        self.assertEqual((proxy.seen, origin.seen), ([], []))

    def test_no_proxy_takes_a_network_as_requests_does(self) -> None:
        with Running(page, "127.0.0.2") as origin, Running(page) as proxy:
            saved = {name: os.environ.get(name) for name in ("http_proxy", "no_proxy")}
            os.environ.update(http_proxy=proxy.base, no_proxy="10.0.0.0/8, 127.0.0.0/8")
            try:
                reply = Transport(from_options({})).get(f"{origin.base}/simple/torch/", 1024)
            finally:
                for name, value in saved.items():
                    os.environ.pop(name, None) if value is None else os.environ.update(
                        {name: value})
        self.assertEqual((reply.body, proxy.seen, len(origin.seen)), (PAGE, [], 1))


if __name__ == "__main__":
    unittest.main()
