"""HTTP servers on 127.0.0.x for the tests that attack the network edge:
each records what it was asked (path and headers) and counts the bytes it
sent, and stops when its `with` block ends. A handler is a function of the
request that returns (status, headers, body); the body may be an iterator
of chunks, so a server can lie about lengths or drip bytes slowly."""

from __future__ import annotations

import http.server
import json
import re
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

Body = Union[bytes, Iterable[bytes]]
Answer = Tuple[int, Dict[str, str], Body]


@dataclass
class Seen:
    path: str
    headers: Dict[str, str]


@dataclass
class Server:
    host: str
    port: int
    scheme: str = "http"
    seen: List[Seen] = field(default_factory=list)
    sent: int = 0

    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def authorizations(self) -> List[str]:
        return [s.headers["Authorization"] for s in self.seen if "Authorization" in s.headers]


class Running:
    """A server in a thread; a `with` block starts and stops it."""

    def __init__(self, handler: Callable[[Server, Seen], Answer], host: str = "127.0.0.1",
                 tls: Optional[Tuple[Path, Path]] = None) -> None:
        self.handler = handler
        self.host = host
        self.tls = tls

    def __enter__(self) -> Server:
        state = Server(self.host, 0, "https" if self.tls else "http")
        handler = self.handler

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                seen = Seen(self.path, dict(self.headers.items()))
                state.seen.append(seen)
                status, headers, body = handler(state, seen)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                if isinstance(body, bytes) and "Content-Length" not in headers:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for chunk in ([body] if isinstance(body, bytes) else body):
                        self.wfile.write(chunk)
                        self.wfile.flush()
                        state.sent += len(chunk)
                except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer((self.host, 0), Handler)
        self.httpd.daemon_threads = True
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(self.tls[0]), str(self.tls[1]))
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        state.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return state

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def ranges(data: bytes, spec: Optional[str], cap: Optional[int] = None) -> Answer:
    """An honest answer to a GET of `data` with this Range header (or one
    that sends at most `cap` bytes of each range: a server that sends less)."""
    found = re.fullmatch(r"bytes=(\d*)-(\d*)", spec or "")
    if found is None:
        return 200, {}, data
    first, last = found.groups()
    start = max(len(data) - int(last) if not first else int(first), 0)
    end = len(data) - 1 if not first or not last else min(int(last), len(data) - 1)
    if cap is not None:
        end = min(end, start + cap - 1)
    return 206, {"Content-Range": f"bytes {start}-{end}/{len(data)}"}, data[start:end + 1]


def simple_page(names_urls: Iterable[Tuple[str, str]], requires_python: str = ">=3.9") -> bytes:
    """A PEP 691 JSON project page."""
    return json.dumps({"meta": {"api-version": "1.0"}, "name": "torch", "files": [
        {"filename": name, "url": url, "hashes": {}, "requires-python": requires_python}
        for name, url in names_urls]}).encode()


def self_signed(directory: Path, host: str = "127.0.0.1") -> Tuple[Path, Path]:
    """A certificate for `host` and its key, made with openssl."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", f"/CN={host}", "-addext", f"subjectAltName=IP:{host}",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def drip(data: bytes, every: float) -> Iterator[bytes]:
    """`data` a byte at a time, `every` seconds apart: a slow server."""
    import time
    for index in range(len(data)):
        yield data[index:index + 1]
        time.sleep(every)
