"""pip's own configuration, read as `pip download` reads it: where the
indexes are (index-url, extra-index-url, find-links, no-index), whose
credentials go to which of them, and how to reach them (cert, client-cert,
trusted-host, proxy, timeout). The one place that asks pip for its
settings: `pip config list` prints the files' and PIP_* variables' values,
already merged file over file; the section a value comes from is ranked as
pip ranks it, `global` < `download` < the environment (`:env:`).

Credentials are kept by origin (scheme, host, port), as pip keeps them:
the user:password of an index URL goes to that origin only, never to
another port of the same host; within an origin, the configured URL with
the longest path prefix gives them. ~/.netrc (or $NETRC) is pip's last
resort, matched by host name as pip's requests matches it, so its
`default` entry, as in pip, goes to every host without a machine entry,
a redirect's host included."""

from __future__ import annotations

import ast
import dataclasses
import functools
import netrc
import os
import re
import subprocess
import sys
import urllib.parse
from typing import Dict, Optional, Tuple

from torch_backport.infra.errors import printable

PYPI = "https://pypi.org/simple"
DEFAULT_TIMEOUT = 15.0  # pip's own default, seconds per socket read
# A section later here wins, as pip's ConfigOptionParser ranks them.
SECTIONS = ("global", "download", ":env:")
Origin = Tuple[str, str, int]


def origin(url: str) -> Origin:
    """(scheme, host, port) of `url`, the default port filled in."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"https": 443, "http": 80}.get(scheme, 0)


def without_login(url: str) -> str:
    """`url` with any user:password taken out of it (it goes in a header)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def login_of(url: str) -> Optional[Tuple[str, str]]:
    parts = urllib.parse.urlsplit(url)
    if not parts.username:
        return None
    return (urllib.parse.unquote(parts.username), urllib.parse.unquote(parts.password or ""))


def shown_url(url: str) -> str:
    """`url` as it may be printed: never with its password, nothing a
    terminal would act on; a URL urllib cannot parse (an invalid IPv6 host,
    a port out of range) loses everything up to its `@` all the same."""
    try:
        shown = without_login(url)
    except ValueError:
        shown = re.sub(r"//[^/?#]*@", "//", url)
    return printable(shown)


@dataclasses.dataclass(frozen=True)
class PipConfig:
    """What the network paths need of pip's configuration."""
    index_urls: Tuple[str, ...]   # index-url, then extra-index-url; none with no-index
    find_links: Tuple[str, ...]   # URLs or local paths
    # Each configured URL that carries a user:password (without it), with it.
    logins: Tuple[Tuple[str, Tuple[str, str]], ...] = ()
    cert: Optional[str] = None
    client_cert: Optional[str] = None
    trusted_hosts: Tuple[str, ...] = ()
    proxy: Optional[str] = None
    timeout: float = DEFAULT_TIMEOUT

    def login_for(self, url: str) -> Optional[Tuple[str, str]]:
        """The credentials pip would send to `url`: its own user:password;
        else, among the configured URLs of its origin, the one whose path is
        the longest prefix of its path (pip's MultiDomainBasicAuth: two
        indexes on one host each get their own), or the first of them (pip
        reuses an origin's credentials for its files); else ~/.netrc's for
        its host."""
        own = login_of(url)
        if own is not None:
            return own
        wanted = origin(url)
        path = urllib.parse.urlsplit(url).path
        same_origin = [(urllib.parse.urlsplit(known).path.rstrip("/"), login)
                       for known, login in self.logins if origin(known) == wanted]
        under = [(len(prefix), login) for prefix, login in same_origin
                 if path == prefix or path.startswith(prefix + "/")]
        if under:
            return max(under, key=lambda found: found[0])[1]
        if same_origin:
            return same_origin[0][1]
        return netrc_login(wanted[1])

    def trusts(self, url: str) -> bool:
        """Whether pip's trusted-host names `url`'s host (or host:port)."""
        scheme, host, port = origin(url)
        return any(entry.lower() in (host, f"{host}:{port}") for entry in self.trusted_hosts)


def netrc_login(host: str) -> Optional[Tuple[str, str]]:
    path = os.environ.get("NETRC")
    try:
        entry = netrc.netrc(path).authenticators(host) if host else None
    except (OSError, netrc.NetrcParseError):
        return None
    return (entry[0], entry[2] or "") if entry and entry[0] else None


def parse_listing(text: str) -> Dict[str, str]:
    """`pip config list` -> the winning value of each option, by section rank."""
    ranked: Dict[str, Tuple[int, str]] = {}
    for line in text.splitlines():
        key, sep, raw = line.partition("=")
        section, dot, option = key.rpartition(".")
        if not sep or not dot or section not in SECTIONS:
            continue
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            continue
        rank = SECTIONS.index(section)
        if option not in ranked or ranked[option][0] <= rank:
            ranked[option] = (rank, str(value))
    return {option: value for option, (_, value) in ranked.items()}


def truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def from_options(options: Dict[str, str]) -> PipConfig:
    no_index = truthy(options.get("no-index"))
    index_url = options.get("index-url", "").split() or [PYPI]
    urls = [] if no_index else [*index_url[:1], *options.get("extra-index-url", "").split()]
    links = options.get("find-links", "").split()
    logins = tuple((without_login(url), login) for url in [*urls, *links]
                   if (login := login_of(url)) is not None)
    try:
        timeout = float(options.get("timeout") or options.get("default-timeout") or DEFAULT_TIMEOUT)
    except ValueError:
        timeout = DEFAULT_TIMEOUT
    return PipConfig(
        index_urls=tuple(without_login(url) for url in urls),
        find_links=tuple(without_login(link) for link in links),
        logins=logins,
        cert=options.get("cert") or None,
        client_cert=options.get("client-cert") or None,
        trusted_hosts=tuple(options.get("trusted-host", "").split()),
        proxy=options.get("proxy") or None,
        timeout=timeout,
    )


def pip_environment() -> Dict[str, str]:
    # A version is pinned exactly here, so a cap in pip's configuration (a
    # build machine's torch<=X) would only refuse a release it cannot
    # choose. An empty PIP_CONSTRAINT would be ignored by pip: /dev/null.
    return dict(os.environ, PIP_CONSTRAINT=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")


def options(python: str = sys.executable,
            env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The winning value of each of pip's options, as `python`'s pip sees them."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"],
                            capture_output=True, text=True, env=env or pip_environment())
    return parse_listing(listed.stdout if listed.returncode == 0 else "")


@functools.lru_cache(maxsize=None)
def load() -> PipConfig:
    """This machine's pip configuration (files and PIP_* variables)."""
    return from_options(options())
