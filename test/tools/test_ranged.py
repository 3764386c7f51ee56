"""Reading a wheel's members by HTTP range (torch_backport/ranged.py), from
a local server that honours ranges, one that ignores them, and one that
sends less than it was asked for: the members come back checked, or
NoRanges says why, and never a read that hangs."""

from __future__ import annotations

import http.server
import io
import re
import threading
import unittest
import zipfile
from typing import Callable, Dict, Iterator, Optional

from torch_backport.pip_config import from_options
from torch_backport.ranged import NoRanges, RangedFile
from torch_backport.transport import Transport

MEMBER = "torch/_inductor/config.py"


def wheel_bytes() -> bytes:
    """A zip with one small member among 2 MB of incompressible filler."""
    made = io.BytesIO()
    with zipfile.ZipFile(made, "w") as wheel:
        wheel.writestr("torch/filler.bin", bytes(range(256)) * 8192, zipfile.ZIP_STORED)
        wheel.writestr(MEMBER, b"pre_grad_pass_timing = 'default'\n")
    return made.getvalue()


def server(data: bytes, answer: Callable[[bytes, Optional[str]], tuple]) -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, headers, body = answer(data, self.headers.get("Range"))
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/torch-2.11.0-cp311-none-any.whl"
    finally:
        httpd.shutdown()


def ranges(data: bytes, spec: Optional[str], cap: Optional[int] = None) -> tuple:
    found = re.fullmatch(r"bytes=(\d*)-(\d*)", spec or "")
    if found is None:
        return 200, {}, data
    first, last = found.groups()
    start = len(data) - int(last) if not first else int(first)
    end = len(data) - 1 if not first or not last else min(int(last), len(data) - 1)
    if cap is not None:
        end = min(end, start + cap - 1)
    headers: Dict[str, str] = {"Content-Range": f"bytes {start}-{end}/{len(data)}"}
    return 206, headers, data[start:end + 1]


class RangedFileTest(unittest.TestCase):
    def read(self, answer: Callable[[bytes, Optional[str]], tuple]) -> tuple:
        data = wheel_bytes()
        for url in server(data, answer):
            remote = RangedFile(url, Transport(from_options({})))
            with zipfile.ZipFile(io.BufferedReader(remote, 1 << 16)) as wheel:
                return wheel.read(MEMBER), remote.transferred, len(data)
        raise AssertionError("no server")

    def test_a_member_is_read_without_the_rest_of_the_file(self) -> None:
        member, transferred, size = self.read(ranges)
        self.assertEqual(member, b"pre_grad_pass_timing = 'default'\n")
        self.assertLess(transferred, size // 2)

    def test_a_server_without_ranges_is_named_before_its_body_is_read(self) -> None:
        with self.assertRaisesRegex(NoRanges, r"127\.0\.0\.1:\d+/\S+\.whl answered a "
                                              r"byte-range request with HTTP 200 \(no ranges\)"):
            self.read(lambda data, spec: (200, {}, data))

    def test_a_server_that_sends_less_than_asked_is_refused_not_waited_for(self) -> None:
        with self.assertRaisesRegex(NoRanges,
                                    r"127\.0\.0\.1:\d+/\S+\.whl answered bytes \d+-\d+ for "):
            self.read(lambda data, spec: ranges(data, spec, cap=1000))


if __name__ == "__main__":
    unittest.main()
