"""A remote file read by HTTP byte ranges, as a seekable binary file:
`zipfile` over it reads a wheel's central directory and the members asked
for, a few MB of a 900 MB torch wheel.

Why not `remotezip` or `httpx`: the command runs under any python3 the user
has (scripts/apply.sh needs nothing installed), and this is the standard
library's `urllib` plus one `io.RawIOBase` whose reads become Range
requests, fetched in blocks and kept, so `zipfile`'s small reads cost a
handful of requests. A server that answers a Range request with the whole
file (200) raises `NoRanges` before the body is read."""

from __future__ import annotations

import base64
import io
import netrc
import re
import urllib.parse
import urllib.request
from typing import Dict, Optional, Tuple

BLOCK = 256 * 1024
TIMEOUT = 60
CONTENT_RANGE_RE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


class NoRanges(Exception):
    """The server does not answer byte-range requests: the message says how."""


def authorization(url: str, login: Optional[Tuple[str, str]]) -> Dict[str, str]:
    """Basic credentials for `url`'s host: `login` (from pip's configured
    index URL), else ~/.netrc's entry, else none."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if login is None:
        try:
            entry = netrc.netrc().authenticators(host)
        except (OSError, netrc.NetrcParseError):
            entry = None
        login = (entry[0], entry[2] or "") if entry and entry[0] else None
    if login is None:
        return {}
    token = base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


class RangedFile(io.RawIOBase):
    """`url`'s bytes; each read past what is kept fetches whole BLOCKs."""

    def __init__(self, url: str, login: Optional[Tuple[str, str]] = None) -> None:
        super().__init__()
        self.url = url
        self.headers = authorization(url, login)
        self.position = 0
        self.blocks: Dict[int, bytes] = {}
        self.transferred = 0
        self.requests = 0
        # The last 64 KiB holds the zip's end record: it also tells the size.
        tail, self.size = self._fetch(None, 65536)
        self._keep_tail(tail)

    def _fetch(self, start: Optional[int], length: int) -> Tuple[bytes, int]:
        spec = f"bytes=-{length}" if start is None else f"bytes={start}-{start + length - 1}"
        host = urllib.parse.urlsplit(self.url).hostname
        request = urllib.request.Request(self.url, headers={**self.headers, "Range": spec})
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            if response.status != 206:
                raise NoRanges(f"{host} answered a byte-range request with "
                               f"HTTP {response.status} (no ranges)")
            found = CONTENT_RANGE_RE.fullmatch(response.headers.get("Content-Range", ""))
            if found is None:
                raise NoRanges(f"{host} sent no usable Content-Range")
            data = response.read()
        self.requests += 1
        self.transferred += len(data)
        first, last, size = (int(part) for part in found.groups())
        asked = (size - min(length, size)) if start is None else start
        asked_last = min(asked + length, size) - 1
        if (first, last) != (asked, asked_last) or len(data) != last - first + 1:
            # A server that sends less than asked (or elsewhere) would leave
            # a read that never ends: the whole wheel instead.
            raise NoRanges(f"{host} answered bytes {first}-{last} for {spec}")
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
                raise NoRanges(f"{self.url}: no bytes at {at} of {self.size}")
            out += piece
            at += len(piece)
        buffer[:len(out)] = out
        self.position = end
        return len(out)
