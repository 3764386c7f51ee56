"""A remote file read by HTTP byte ranges, as a seekable binary file:
`zipfile` over it reads a wheel's central directory and the members asked
for, a few MB of a 900 MB torch wheel.

Requests go through transport.py (credentials by origin, redirects, pip's
TLS and proxy settings, a deadline per request). Reads are fetched in
blocks and kept, so `zipfile`'s small reads cost a handful of requests.
What one RangedFile may fetch in all is capped (`budget`): a zip whose end
record claims a central directory of hundreds of MB is refused before it is
fetched. A server that answers a Range request with the whole file (200),
or with other bytes than were asked for, raises `NoRanges` without its body
being read past the range."""

from __future__ import annotations

import io
import re
import time
from typing import Dict, Optional, Tuple

from torch_backport.download.pip_config import shown_url
from torch_backport.infra.errors import BackportError
from torch_backport.download.transport import Transport, TransportError

BLOCK = 256 * 1024
BUDGET = 64 * 1024 * 1024  # one release's few files; torch's directory is ~2 MB
READ_DEADLINE = 600.0  # seconds for all the requests of one wheel
CONTENT_RANGE_RE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


class NoRanges(BackportError):
    """The file cannot be read by range from this server: the message says why."""


class RangedFile(io.RawIOBase):
    """`url`'s bytes; each read past what is kept fetches whole BLOCKs."""

    def __init__(self, url: str, transport: Transport, budget: int = BUDGET,
                 earlier: Optional["RangedFile"] = None) -> None:
        """`earlier`: a closed RangedFile of the same URL whose blocks are kept."""
        super().__init__()
        self.url = url
        self.transport = transport
        self.budget = budget
        self.position = 0
        self.transferred = 0  # by this reader
        self.spent = 0  # by every reader of this URL: what the budget caps
        self.started = time.monotonic()
        self.requests = 0
        self.blocks: Dict[int, bytes] = {}
        self.size: int = 0
        if earlier is not None:
            self.blocks, self.size = earlier.blocks, earlier.size
            self.spent, self.started = earlier.spent, earlier.started
            return
        # The last 64 KiB holds the zip's end record: it also tells the size.
        tail, self.size = self._fetch(None, 65536)
        self._keep_tail(tail)

    def _fetch(self, start: Optional[int], length: int) -> Tuple[bytes, int]:
        where = shown_url(self.url)
        if time.monotonic() - self.started > READ_DEADLINE:
            raise NoRanges(f"{where}: not read within {READ_DEADLINE:.0f} s; refused")
        if self.spent + length > self.budget:
            raise NoRanges(f"{where}: reading it would take more than "
                           f"{self.budget // (1024 * 1024)} MB by range; refused")
        spec = f"bytes=-{length}" if start is None else f"bytes={start}-{start + length - 1}"
        try:
            reply = self.transport.get(self.url, length, {"Range": spec}, wanted=206)
        except TransportError as problem:
            raise NoRanges(str(problem)) from None
        if reply.status != 206:
            raise NoRanges(f"{where} answered a byte-range request with "
                           f"HTTP {reply.status} (no ranges)")
        found = CONTENT_RANGE_RE.fullmatch(reply.headers.get("Content-Range", ""))
        if found is None:
            raise NoRanges(f"{where} sent no usable Content-Range")
        data = reply.body
        self.requests += 1
        self.transferred += len(data)
        self.spent += len(data)
        first, last, size = (int(part) for part in found.groups())
        asked = (size - min(length, size)) if start is None else start
        asked_last = min(asked + length, size) - 1
        if (first, last) != (asked, asked_last) or len(data) != last - first + 1:
            # A server that sends less than asked (or elsewhere) would leave
            # a read that never ends: the whole wheel instead.
            raise NoRanges(f"{where} answered bytes {first}-{last} for {spec}")
        return data, size

    def _keep_tail(self, tail: bytes) -> None:
        start = self.size - len(tail)
        first = start // BLOCK
        for block in range(first, (self.size - 1) // BLOCK + 1):
            lo, hi = block * BLOCK, min((block + 1) * BLOCK, self.size)
            if lo >= start:
                self.blocks[block] = tail[lo - start:hi - start]

    def _block(self, number: int) -> bytes:
        if number not in self.blocks:
            # A run of missing blocks is one request (a central directory).
            data, _ = self._fetch(number * BLOCK, BLOCK)
            self.blocks[number] = data
        return self.blocks[number]

    def _prefetch(self, start: int, end: int) -> None:
        first, last = start // BLOCK, (end - 1) // BLOCK
        missing = [b for b in range(first, last + 1) if b not in self.blocks]
        if len(missing) > 1:
            lo, hi = missing[0], missing[-1]
            data, _ = self._fetch(lo * BLOCK, min((hi + 1) * BLOCK, self.size) - lo * BLOCK)
            for block in range(lo, hi + 1):
                if block not in self.blocks:
                    self.blocks[block] = data[(block - lo) * BLOCK:(block - lo + 1) * BLOCK]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def read(self, size: Optional[int] = -1) -> bytes:
        """Up to `size` bytes; a read past the budget is refused before any
        memory is set aside for it (a zip64 end record may claim exabytes)."""
        wanted = self.size - self.position if size is None or size < 0 else size
        wanted = max(0, min(wanted, self.size - self.position))
        if wanted > self.budget:
            raise NoRanges(f"{shown_url(self.url)}: a read of {wanted} bytes is more than "
                           f"{self.budget // (1024 * 1024)} MB by range; refused")
        buffer = bytearray(wanted)
        return bytes(buffer[:self.readinto(buffer)])

    def readinto(self, buffer: "bytearray | memoryview") -> int:  # type: ignore[override]
        end = min(self.position + len(buffer), self.size)
        if end <= self.position:
            return 0
        self._prefetch(self.position, end)
        out = bytearray()
        at = self.position
        while at < end:
            block = self._block(at // BLOCK)
            offset = at - (at // BLOCK) * BLOCK
            piece = block[offset:offset + (end - at)]
            if not piece:
                raise NoRanges(f"{shown_url(self.url)}: no bytes at {at} of {self.size}")
            out += piece
            at += len(piece)
        buffer[:len(out)] = out
        self.position = end
        return len(out)
