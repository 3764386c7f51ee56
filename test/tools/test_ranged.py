"""Reading a wheel's members by HTTP range (torch_backport/download/ranged.py), from
a local server that honours ranges, one that ignores them, and one that
sends less than it was asked for: the members come back checked, or
NoRanges says why, and never a read that hangs."""

from __future__ import annotations

import io
import unittest
import zipfile
from typing import Callable, Optional

from local_servers import Answer, ranges, Running, Seen, Server

from torch_backport.download.pip_config import from_options
from torch_backport.download.ranged import NoRanges, RangedFile
from torch_backport.download.transport import Transport

MEMBER = "torch/_inductor/config.py"


def wheel_bytes() -> bytes:
    """A zip with one small member among 2 MB of incompressible filler."""
    made = io.BytesIO()
    with zipfile.ZipFile(made, "w") as wheel:
        wheel.writestr("torch/filler.bin", bytes(range(256)) * 8192, zipfile.ZIP_STORED)
        wheel.writestr(MEMBER, b"pre_grad_pass_timing = 'default'\n")
    return made.getvalue()


class RangedFileTest(unittest.TestCase):
    def read(self, answer: Callable[[bytes, Optional[str]], tuple]) -> tuple:
        data = wheel_bytes()

        def handler(server: Server, seen: Seen) -> Answer:
            return answer(data, seen.headers.get("Range"))  # type: ignore[no-any-return]

        with Running(handler) as server:
            remote = RangedFile(f"{server.base}/torch-2.11.0-cp311-none-any.whl",
                                Transport(from_options({})))
            with zipfile.ZipFile(remote) as wheel:
                return wheel.read(MEMBER), remote.transferred, len(data)

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
