"""Every HTTP request the project makes: the one place that talks to an
index or a file host. Built on urllib3 2.x (pip's own transport layer, kept
up to date by its maintainers) with pip's settings from pip_config.py:
its cert, client-cert, trusted-host and proxy.

The rules it keeps, whatever a server says:
- Credentials go to their origin only. Redirects are followed here, one hop
  at a time (at most MAX_REDIRECTS), and each hop gets the credentials of
  its own origin: an index's Authorization never reaches the host it
  redirects to. A redirect from https to http is refused when the request
  carries credentials or would carry them.
- A reply is never read past what was asked: a Content-Length over the
  limit is refused before the body, a body that runs over is refused as
  soon as it does.
- Each request has a deadline for the whole request, not only for each
  socket read: a server that drips a byte a minute is cut off.
- Bytes received are counted (`received`), so commands can say what they
  cost on the network.

Every failure is a `TransportError` with a one-line message that names the
URL without its password."""

from __future__ import annotations

import base64
import dataclasses
import importlib.util
import ipaddress
import os
import re
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from typing import Dict, List, Mapping, Optional

from torch_backport.infra.errors import BackportError, printable, Refused
from torch_backport.download.pip_config import load, origin, PipConfig, shown_url, without_login

try:
    import urllib3
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
    from urllib3.exceptions import HTTPError as Urllib3Error
except ImportError:  # apply, --status, --revert and --verify need nothing installed
    urllib3 = None  # type: ignore[assignment]
    Urllib3Error = OSError  # type: ignore[assignment,misc]

MIN_URLLIB3 = (2, 2)  # HTTPResponse.read1, for reads that return what has arrived
MAX_REDIRECTS = 10
DEADLINE = 300.0  # seconds for one whole request, body included
CHUNK = 1 << 16
INSTALL_HINT = ("reading remote wheels needs urllib3 2.2 or later and packaging: `python3 -m pip "
                "install 'urllib3>=2.2' packaging` (`pip install .` of this project brings them)")


class TransportError(BackportError):
    """A request that failed or was refused; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Reply:
    url: str          # the URL that answered, after redirects (no password)
    status: int
    headers: Mapping[str, str]
    body: bytes


def available() -> bool:
    """urllib3 2.2 or later, and packaging (simple_index.py), can be imported."""
    if urllib3 is None or importlib.util.find_spec("packaging") is None:
        return False
    version = getattr(urllib3, "__version__", "0")
    found = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    return found >= MIN_URLLIB3


def used() -> Optional["Transport"]:
    """The shared transport if this process made a request, else None."""
    return _shared


def require() -> None:
    if not available():
        raise Refused(INSTALL_HINT)


class Watchdog:
    """Ends one request at its deadline, wherever it waits (connecting, the
    TLS handshake, the headers, the body): it shuts the sockets of the
    connections the request used."""

    def __init__(self) -> None:
        self.connections: List[object] = []
        self.fired = False

    def fire(self) -> None:
        self.fired = True
        for connection in self.connections:
            sock = getattr(connection, "sock", None)
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


_watching = threading.local()


def watched(base: type) -> type:
    """`base`'s connections, each told to the request's watchdog."""
    class Watched(base):  # type: ignore[misc]
        def request(self, *args: object, **kwargs: object) -> object:
            dog = getattr(_watching, "dog", None)
            if dog is not None:
                dog.connections.append(self)
            return super().request(*args, **kwargs)
    return Watched


def watched_pools() -> Dict[str, type]:
    class Plain(HTTPConnectionPool):
        ConnectionCls = watched(HTTPConnection)

    class Secure(HTTPSConnectionPool):
        ConnectionCls = watched(HTTPSConnection)
    return {"http": Plain, "https": Secure}


def basic(login: Optional[tuple]) -> Dict[str, str]:  # type: ignore[type-arg]
    if login is None:
        return {}
    token = base64.b64encode(f"{login[0]}:{login[1]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


class Transport:
    """A connection pool per (proxy, verification) with pip's settings, and
    the count of bytes received through it."""

    def __init__(self, config: PipConfig, deadline: float = DEADLINE) -> None:
        require()
        self.config = config
        self.deadline = deadline
        self.received = 0
        self.requests = 0
        self._pools: Dict[tuple, "urllib3.PoolManager"] = {}  # type: ignore[type-arg]

    def _tls(self, verify: bool) -> ssl.SSLContext:
        if not verify:  # pip's trusted-host: asked for by name, so not warned of per request
            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        context = ssl.create_default_context(cafile=self.config.cert) if verify else \
            ssl._create_unverified_context()
        if self.config.client_cert:
            context.load_cert_chain(self.config.client_cert)
        return context

    def _proxy_for(self, url: str) -> Optional[str]:
        """pip's `proxy` for every request (pip ignores NO_PROXY for it), else
        the environment's, which NO_PROXY can bypass (requests' rules). A
        proxy without a scheme is refused: its user:password would be lost."""
        if self.config.proxy:
            proxy: Optional[str] = self.config.proxy
        else:
            scheme, host, port = origin(url)
            if bypasses_proxy(host, port):
                return None
            proxy = urllib.request.getproxies_environment().get(scheme)
        if proxy and "://" not in proxy:
            raise TransportError(f"the proxy {shown_url('//' + proxy)[2:]} has no scheme; "
                                 "write it as http://HOST:PORT (with USER:PASSWORD@ before "
                                 "HOST if it needs them)")
        return proxy

    def _pool(self, url: str) -> "urllib3.PoolManager":
        verify = not self.config.trusts(url)
        proxy = self._proxy_for(url)
        key = (proxy, verify)
        if key not in self._pools:
            try:
                context = self._tls(verify)
            except (OSError, ssl.SSLError) as problem:
                raise TransportError(f"pip's cert or client-cert cannot be loaded ({problem})")
            if proxy:
                login = urllib.parse.urlsplit(proxy)
                headers = ({} if not login.username else urllib3.make_headers(
                    proxy_basic_auth=f"{urllib.parse.unquote(login.username)}:"
                                     f"{urllib.parse.unquote(login.password or '')}"))
                self._pools[key] = urllib3.ProxyManager(
                    without_login(proxy), proxy_headers=headers, ssl_context=context)
            else:
                self._pools[key] = urllib3.PoolManager(ssl_context=context)
            self._pools[key].pool_classes_by_scheme = watched_pools()
        return self._pools[key]

    def get(self, url: str, limit: int, headers: Optional[Mapping[str, str]] = None,
            wanted: int = 200) -> Reply:
        """GET `url`, following redirects by the rules above; the body is at
        most `limit` bytes or the request is refused. A reply of another
        status than `wanted` comes back without its body. Every failure is a
        TransportError (a URL urllib cannot parse, as another)."""
        try:
            return self._get(url, limit, headers, wanted)
        except ValueError as problem:  # urlsplit: an invalid IPv6 host, a port out of range
            raise TransportError(f"{shown_url(url)}: not a URL that can be fetched "
                                 f"({one_line(problem)})") from None

    def _get(self, url: str, limit: int, headers: Optional[Mapping[str, str]],
             wanted: int) -> Reply:
        started = time.monotonic()
        carried = False
        for _ in range(MAX_REDIRECTS + 1):
            login = self.config.login_for(url)
            carried = carried or login is not None
            reply = self._one(without_login(url), {**(headers or {}), **basic(login)},
                              limit, started, wanted)
            location = reply.headers.get("Location")
            if reply.status not in (301, 302, 303, 307, 308) or not location:
                return reply
            following = urllib.parse.urljoin(reply.url, location)
            if urllib.parse.urlsplit(following).scheme not in ("http", "https"):
                raise TransportError(f"{shown_url(reply.url)} redirected to "
                                     f"{shown_url(following)}: not http(s), refused")
            downgrade = (origin(reply.url)[0], origin(following)[0]) == ("https", "http")
            if downgrade and (carried or self.config.login_for(following) is not None):
                raise TransportError(
                    f"{shown_url(reply.url)} redirected to {shown_url(following)}: an https "
                    "request with credentials is not followed to http (they would go in clear)")
            url = without_login(following)  # a Location's own user:password is not used
        raise TransportError(f"{shown_url(url)}: more than {MAX_REDIRECTS} redirects")

    def _one(self, url: str, headers: Mapping[str, str], limit: int, started: float,
             wanted: int) -> Reply:
        left = self.deadline - (time.monotonic() - started)
        if left <= 0:
            raise TransportError(f"{shown_url(url)}: no reply within {self.deadline:.0f} s")
        per_read = min(self.config.timeout, left)
        dog = _watching.dog = Watchdog()
        timer = threading.Timer(left, dog.fire)
        timer.daemon = True
        timer.start()
        try:
            return self._answer(url, headers, limit, started, wanted, per_read)
        except TransportError:
            if dog.fired:
                raise TransportError(f"{shown_url(url)}: not finished within "
                                     f"{self.deadline:.0f} s; refused") from None
            raise
        finally:
            timer.cancel()
            _watching.dog = None

    def _answer(self, url: str, headers: Mapping[str, str], limit: int, started: float,
                wanted: int, per_read: float) -> Reply:
        try:
            response = self._pool(url).urlopen(
                "GET", url, headers={"Accept-Encoding": "identity", **headers},
                redirect=False, retries=False, preload_content=False, decode_content=False,
                timeout=urllib3.Timeout(connect=per_read, read=per_read))
        except (Urllib3Error, OSError, ValueError) as problem:
            raise TransportError(f"{shown_url(url)}: {one_line(problem)}") from None
        self.requests += 1
        unwanted = response.status != wanted  # a redirect's or an error's body is not read
        try:
            body = b"" if unwanted else self._body(url, response, limit, started)
        except BaseException:
            response.close()  # a connection refused half-read is not reused
            raise
        finally:
            if unwanted:
                response.close()
            response.release_conn()
        return Reply(url, response.status, response.headers, body)  # case-insensitive

    def _body(self, url: str, response: "urllib3.BaseHTTPResponse", limit: int,
              started: float) -> bytes:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise TransportError(f"{shown_url(url)}: the reply is {int(declared)} bytes where "
                                 f"at most {limit} were asked for; refused")
        parts: List[bytes] = []
        size = 0
        while True:
            if time.monotonic() - started > self.deadline:
                raise TransportError(f"{shown_url(url)}: not finished within "
                                     f"{self.deadline:.0f} s; refused")
            try:
                chunk = response.read1(min(CHUNK, limit - size + 1))
            except (Urllib3Error, OSError, ValueError) as problem:
                raise TransportError(f"{shown_url(url)}: {one_line(problem)}") from None
            if not chunk:
                return b"".join(parts)
            size += len(chunk)
            self.received += len(chunk)
            if size > limit:
                raise TransportError(f"{shown_url(url)}: the reply ran past the {limit} "
                                     "bytes asked for; refused")
            parts.append(chunk)


def one_line(problem: BaseException) -> str:
    """What `problem` says, on one line, at most 300 characters, printable."""
    text = " ".join(str(problem).split()) or type(problem).__name__
    return printable(text[:300])


def no_proxy_entries() -> List[str]:
    value = os.environ.get("no_proxy") or os.environ.get("NO_PROXY") or ""
    return [entry for entry in value.replace(" ", "").split(",") if entry]


def bypasses_proxy(host: str, port: int) -> bool:
    """Whether NO_PROXY sends a request to `host`:`port` past the environment's proxy, by
    requests' rules (requests.utils.should_bypass_proxies): an IP address
    matches an entry that is the same address or a network holding it (CIDR,
    127.0.0.0/8); a name matches an entry it ends with, with or without its
    port (`example.com`, `.example.com`, `example.com:8080`); `*` matches
    everything. Then urllib's own rules, as requests falls back to them."""
    entries = no_proxy_entries()
    if "*" in entries:
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in entries:
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                continue
        elif host.endswith(entry) or f"{host}:{port}".endswith(entry):
            return True
    return bool(urllib.request.proxy_bypass(host))


_shared: Optional[Transport] = None


def shared() -> Transport:
    """The process's transport with this machine's pip settings: one count
    of bytes received for a whole command."""
    global _shared
    if _shared is None:
        _shared = Transport(load())
    return _shared
