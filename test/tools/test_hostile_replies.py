"""Replies and zips that lie are refused, bounded, and never a traceback
(transport.py, ranged.py, wheels.members): a reply longer than its range,
a central directory claimed at 200 MB, a member longer than RECORD says, a
zip bomb, a server that drips, deflate garbage, an unknown compression
method, and a RECORD entry the zip lacks. The servers run on 127.0.0.x and
count what they send."""

from __future__ import annotations

import io
import json
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import unittest
import zipfile
from typing import Callable, Dict, Iterator, List

from local_servers import Answer, drip, ranges, Running, Seen, Server

from torch_backport.infra import record
from torch_backport.infra.paths import REPO
from torch_backport.infra.errors import Refused
from torch_backport.download.pip_config import from_options
from torch_backport.download.ranged import NoRanges, RangedFile
from torch_backport.download.transport import Transport, TransportError
from torch_backport.download.release_wheels import members, UnreadableMember

MB = 1024 * 1024
MEMBER = "torch/_inductor/config.py"
SOURCE = b"pre_grad_pass_timing = 'default'\n"


def transport(deadline: float = 60.0) -> Transport:
    return Transport(from_options({}), deadline=deadline)


def wheel_zip(entries: Dict[str, bytes], record_lines: List[str],
              compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A torch wheel's zip with these entries and exactly this RECORD."""
    made = io.BytesIO()
    with zipfile.ZipFile(made, "w", compression) as wheel:
        for name, data in entries.items():
            wheel.writestr(name, data)
        wheel.writestr("torch-2.11.0.dist-info/RECORD", "\n".join(record_lines) + "\n")
    return made.getvalue()


def record_line(name: str, data: bytes, size: int | None = None) -> str:
    return f"{name},sha256={record.digest(data)},{len(data) if size is None else size}"


def read_member(data: bytes) -> Dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as wheel:
        return members(wheel, [MEMBER], "the test wheel")


def zeros_ending_in(size: int, tail: bytes) -> Callable[[Server, Seen], Answer]:
    """A server of a `size`-byte file of zeros that ends in `tail`, each
    range made on demand (the file need not fit in memory)."""
    def handler(server: Server, seen: Seen) -> Answer:
        found = re.fullmatch(r"bytes=(\d*)-(\d*)", seen.headers.get("Range", ""))
        assert found is not None
        first = size - int(found[2]) if not found[1] else int(found[1])
        last = size - 1 if not found[1] else min(int(found[2]), size - 1)
        body = bytes(max(0, min(last + 1, size - len(tail)) - first)) + \
            tail[max(0, first - (size - len(tail))):last + 1 - (size - len(tail))]
        return 206, {"Content-Range": f"bytes {first}-{last}/{size}"}, body
    return handler


def zeros(total: int) -> Iterator[bytes]:
    for _ in range(total // MB):
        yield bytes(MB)


class LongReplyTest(unittest.TestCase):
    """A 64 KiB range answered with 300 MB: refused at once, in a process
    whose peak memory stays far below the reply."""

    def peak_and_outcome(self, headers: Dict[str, str]) -> Dict[str, object]:
        def handler(server: Server, seen: Seen) -> Answer:
            return 206, {"Content-Range": f"bytes {300 * MB - 65536}-{300 * MB - 1}/{300 * MB}",
                         **headers}, zeros(300 * MB)

        child = ("import json, resource, sys\n"
                 "from torch_backport.download.pip_config import from_options\n"
                 "from torch_backport.download.ranged import NoRanges, RangedFile\n"
                 "from torch_backport.download.transport import Transport\n"
                 "try:\n"
                 "    RangedFile(sys.argv[1], Transport(from_options({})))\n"
                 "    said = 'read'\n"
                 "except NoRanges as problem:\n"
                 "    said = str(problem)\n"
                 "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024\n"
                 "print(json.dumps([said, peak]))\n")
        with Running(handler) as server:
            done = subprocess.run([sys.executable, "-c", child, f"{server.base}/torch.whl"],
                                  capture_output=True, text=True, timeout=120, cwd=REPO)
        said, peak = json.loads(done.stdout)
        return {"refused": said.endswith("refused"), "traceback": "Traceback" in done.stderr,
                "peak under 300 MB": peak < 300, "sent under 300 MB": server.sent < 300 * MB,
                "said": said.split(": ", 1)[1]}

    def test_a_declared_length_past_the_range_is_refused_before_the_body(self) -> None:
        self.assertEqual(self.peak_and_outcome({"Content-Length": str(300 * MB)}),
                         {"refused": True, "traceback": False, "peak under 300 MB": True,
                          "sent under 300 MB": True,
                          "said": f"the reply is {300 * MB} bytes where at most 65536 were "
                                  "asked for; refused"})

    def test_a_body_without_length_is_refused_as_it_runs_past_the_range(self) -> None:
        self.assertEqual(self.peak_and_outcome({"Connection": "close"}),
                         {"refused": True, "traceback": False, "peak under 300 MB": True,
                          "sent under 300 MB": True,
                          "said": "the reply ran past the 65536 bytes asked for; refused"})


class LyingZipTest(unittest.TestCase):
    def test_a_central_directory_claimed_at_200_mb_is_not_fetched(self) -> None:
        size, claimed = 300 * MB, 200 * MB
        end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, claimed, size - 22 - claimed, 0)
        tail = bytes(65536 - len(end)) + end

        handler = zeros_ending_in(size, tail)

        with Running(handler) as server:
            with self.assertRaisesRegex(NoRanges, "more than 64 MB by range; refused"):
                remote = RangedFile(f"{server.base}/torch.whl", transport())
                zipfile.ZipFile(remote)
        self.assertLess(server.sent, MB)

    def test_a_zip64_directory_claimed_at_exabytes_is_refused_before_memory_is_set_aside(
            self) -> None:
        size, claimed = 2 ** 62, 2 ** 61
        offset = size - 22 - 20 - 56 - claimed
        end = (struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, 1, 1, claimed, offset)
               + struct.pack("<4sLQL", b"PK\x06\x07", 0, size - 22 - 20 - 56, 1)
               + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF,
                             0xFFFFFFFF, 0))
        tail = bytes(65536 - len(end)) + end

        with Running(zeros_ending_in(size, tail)) as server:
            remote = RangedFile(f"{server.base}/torch.whl", transport())
            with self.assertRaisesRegex(NoRanges, "more than 64 MB by range; refused"):
                zipfile.ZipFile(remote)
        self.assertLess(server.sent, MB)

    def test_a_member_longer_than_record_says_is_not_fetched(self) -> None:
        data = wheel_zip({MEMBER: bytes(64 * MB)}, [record_line(MEMBER, SOURCE)],
                         zipfile.ZIP_STORED)

        def handler(server: Server, seen: Seen) -> Answer:
            return ranges(data, seen.headers.get("Range"))

        with Running(handler) as server:
            remote = RangedFile(f"{server.base}/torch.whl", transport())
            with zipfile.ZipFile(remote) as wheel:
                with self.assertRaisesRegex(UnreadableMember, "where RECORD says 33; refused"):
                    members(wheel, [MEMBER], "the test wheel")
        self.assertLess(server.sent, MB)

    def test_a_zip_bomb_member_is_refused_before_it_is_inflated(self) -> None:
        data = wheel_zip({MEMBER: bytes(150 * MB)}, [record_line(MEMBER, SOURCE)])
        self.assertLess(len(data), MB)
        with self.assertRaisesRegex(UnreadableMember, f"is {150 * MB} bytes"):
            read_member(data)

    def test_a_bomb_whose_directory_says_record_size_stops_there(self) -> None:
        data = bytearray(wheel_zip({MEMBER: bytes(150 * MB)}, [record_line(MEMBER, SOURCE)]))
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as wheel:
            info = wheel.getinfo(MEMBER)
        directory = data.find(b"PK\x01\x02")  # the member's central directory entry
        struct.pack_into("<L", data, directory + 24, len(SOURCE))  # uncompressed size
        struct.pack_into("<L", data, directory + 20, len(SOURCE) + 20)  # compressed size
        self.assertGreater(info.file_size, len(SOURCE))
        with self.assertRaisesRegex(UnreadableMember, "a member cannot be read"):
            read_member(bytes(data))

    def test_deflate_garbage_is_an_unreadable_member(self) -> None:
        data = bytearray(wheel_zip({MEMBER: SOURCE * 50}, [record_line(MEMBER, SOURCE * 50)]))
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as wheel:
            info = wheel.getinfo(MEMBER)
        start = info.header_offset + 30 + len(MEMBER.encode())
        data[start:start + info.compress_size] = b"\xff" * info.compress_size
        with self.assertRaisesRegex(UnreadableMember, "a member cannot be read"):
            read_member(bytes(data))

    def test_an_unknown_compression_method_is_an_unreadable_member(self) -> None:
        data = bytearray(wheel_zip({MEMBER: SOURCE}, [record_line(MEMBER, SOURCE)]))
        with zipfile.ZipFile(io.BytesIO(bytes(data))) as wheel:
            info = wheel.getinfo(MEMBER)
        struct.pack_into("<H", data, info.header_offset + 8, 99)
        struct.pack_into("<H", data, data.find(b"PK\x01\x02") + 10, 99)
        with self.assertRaisesRegex(UnreadableMember, "a member cannot be read"):
            read_member(bytes(data))

    def test_a_record_entry_the_zip_lacks_is_an_error(self) -> None:
        data = wheel_zip({}, [record_line(MEMBER, SOURCE)])
        with self.assertRaisesRegex(Refused, f"RECORD lists {MEMBER} but the wheel has no "
                                             "such member"):
            read_member(data)

    def test_a_path_record_does_not_list_is_not_in_the_release(self) -> None:
        other = "torch/other.py"
        self.assertEqual(read_member(wheel_zip({other: SOURCE}, [record_line(other, SOURCE)])),
                         {})

    def test_a_record_that_is_not_csv_is_refused_not_a_traceback(self) -> None:
        with self.assertRaisesRegex(Refused, "RECORD cannot be read"):
            read_member(wheel_zip({}, ["", "only-a-name"]))


class SlowServerTest(unittest.TestCase):
    def test_a_server_that_drips_is_cut_off_at_the_deadline(self) -> None:
        def handler(server: Server, seen: Seen) -> Answer:
            return 200, {"Content-Length": "1000"}, drip(bytes(1000), 0.2)

        with Running(handler) as server:
            started = time.monotonic()
            with self.assertRaisesRegex(TransportError, "not finished within 2 s; refused"):
                transport(deadline=2).get(f"{server.base}/simple/torch/", MB)
            self.assertLess(time.monotonic() - started, 6)
        self.assertLess(server.sent, 1000)

    def test_a_server_that_drips_its_headers_is_cut_off_at_the_deadline(self) -> None:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        stop = threading.Event()

        def serve() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
                    if stop.wait(0.2):
                        return
                    try:
                        connection.sendall(bytes([byte]))
                    except OSError:
                        return

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        started = time.monotonic()
        try:
            with self.assertRaisesRegex(TransportError, "not finished within 2 s; refused"):
                transport(deadline=2).get(f"http://127.0.0.1:{listener.getsockname()[1]}/", MB)
            self.assertLess(time.monotonic() - started, 6)
        finally:
            stop.set()
            thread.join(5)
            listener.close()


class WhatAServerSaysTest(unittest.TestCase):
    """A URL urllib cannot parse, a Location meant for a terminal and markup
    that html.parser asserts on: one-line errors, escaped, no traceback."""

    def test_a_url_urllib_cannot_parse_is_a_transport_error(self) -> None:
        for url in ("http://[::1/simple/", "http://team:s3cret@127.0.0.1:99999/simple/"):
            with self.subTest(url=url), self.assertRaises(TransportError) as failed:
                transport().get(url, 1024)
            self.assertNotIn("s3cret", str(failed.exception))

    def test_a_location_with_terminal_escapes_is_printed_escaped(self) -> None:
        def handler(server: Server, seen: Seen) -> Answer:
            return 302, {"Location": "ftp://files.invalid/\x1b]0;owned\x07\x1b[2J.whl"}, b""

        with Running(handler) as server, self.assertRaises(TransportError) as refused:
            transport().get(f"{server.base}/simple/torch/", 1024)
        message = str(refused.exception)
        self.assertNotIn("\x1b", message)
        self.assertIn("ftp://files.invalid/\\x1b]0;owned\\x07\\x1b[2J.whl: not http(s), "
                      "refused", message)

    def test_markup_html_parser_asserts_on_ends_in_the_fallback(self) -> None:
        from torch_backport.download.simple_index import find_wheel

        def handler(server: Server, seen: Seen) -> Answer:
            return 200, {"Content-Type": "text/html"}, b"<html><![unknown[ x ]]><a href=x>"

        with Running(handler) as server:
            config = from_options({"index-url": f"{server.base}/simple"})
            link, why = find_wheel("2.11.0", "3.11", None, config, transport())
        self.assertIsNone(link)
        self.assertRegex(why, r"^the index's simple API could not be read \(.*marked section")


if __name__ == "__main__":
    unittest.main()
