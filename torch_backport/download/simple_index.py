"""Which wheel of torch==VERSION a target would install, read from the
configured indexes' simple API (PEP 691 JSON, else PEP 503 HTML) and
find-links, without downloading any wheel: pip's `install --dry-run` would
download the whole wheel wherever the index has no PEP 658 metadata.

The choice is pip's: every file of the configured indexes and find-links
whose name is a torch wheel of that version (a local label, 2.13.0+cpu,
matches as PEP 440 says), not yanked, whose Requires-Python admits the
target's Python and whose tags the target takes (`packaging.tags`); the
highest version wins (a local label sorts above none), then the tag the
target ranks first."""

from __future__ import annotations

import dataclasses
import html.parser
import json
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from packaging import tags
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from torch_backport.download.pip_config import PipConfig, shown_url
from torch_backport.download.transport import one_line, Transport, TransportError

PROJECT = "torch"
PAGE_LIMIT = 32 * 1024 * 1024  # PyPI's torch page is 0.4 MB (JSON) to 1 MB (HTML)
ACCEPT = ("application/vnd.pypi.simple.v1+json, "
          "application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1")


@dataclasses.dataclass(frozen=True)
class Link:
    """A file an index or find-links offers."""
    filename: str
    url: str
    requires_python: Optional[str] = None
    yanked: bool = False


class AnchorParser(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.anchors: List[Dict[str, Optional[str]]] = []

    def handle_starttag(self, tag: str, attrs: List[Tuple[str, Optional[str]]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))


def parse_page(body: bytes, content_type: str, page_url: str) -> List[Link]:
    """The links of a simple-API project page, JSON or HTML. A page may only
    point at http(s) files, and a local page at local files too: a remote
    index never names a path on this machine."""
    if "json" in content_type or (not content_type and body.lstrip()[:1] == b"{"):
        links = json_links(json.loads(body), page_url)
    else:
        parser = AnchorParser()
        parser.feed(body.decode("utf-8", "replace"))
        links = []
        for anchor in parser.anchors:
            href = anchor.get("href")
            if href:
                url = urllib.parse.urljoin(page_url, href)
                filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
                links.append(Link(filename, url, anchor.get("data-requires-python"),
                                  "data-yanked" in anchor))
    allowed = {"http", "https"} | ({"file"} if page_url.startswith("file:") else set())
    return [link for link in links if urllib.parse.urlsplit(link.url).scheme in allowed]


def json_links(data: object, page_url: str) -> List[Link]:
    """PEP 691's files, each field checked for its type (a hostile page is
    skipped where it lies, never a traceback)."""
    files = data.get("files") if isinstance(data, dict) else None
    links = []
    for entry in files if isinstance(files, list) else []:
        if not isinstance(entry, dict):
            continue
        name, url, requires = entry.get("filename"), entry.get("url"), entry.get("requires-python")
        if isinstance(name, str) and isinstance(url, str):
            links.append(Link(name, urllib.parse.urljoin(page_url, url),
                              requires if isinstance(requires, str) else None,
                              bool(entry.get("yanked", False))))
    return links


def target_tags(python: str, platform: Optional[str]) -> List[tags.Tag]:
    """The tags a target takes, best first: this machine's own (pip's
    sys_tags), or those of CPython `python` on `platform` and the older
    manylinux/macOS releases of its architecture that pip's --platform takes."""
    version = tuple(int(part) for part in python.split("."))
    if platform is None:
        return list(tags.sys_tags())
    platforms = compatible_platforms(platform)
    return [*tags.cpython_tags(version, platforms=platforms),
            *tags.compatible_tags(version, platforms=platforms)]


def compatible_platforms(platform: str) -> List[str]:
    """`platform` and the older ones of its architecture, best first:
    manylinux_2_28_x86_64 -> ..._2_27_... down to _2_5_ and the legacy
    names; macosx_15_0_arm64 -> packaging's own list down to 11.0."""
    mac = re.fullmatch(r"macosx_(\d+)_(\d+)_(.+)", platform)
    if mac:
        return list(tags.mac_platforms((int(mac[1]), int(mac[2])), mac[3]))
    linux = re.fullmatch(r"manylinux_(\d+)_(\d+)_(.+)", platform)
    if not linux:
        return [platform]
    major, minor, arch = int(linux[1]), int(linux[2]), linux[3]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return ([f"manylinux_{major}_{m}_{arch}" for m in range(minor, 4, -1)]
            + [f"{name}_{arch}" for m, name in legacy.items() if m <= minor])


def choose(links: Iterable[Link], version: str, python: str,
           accepted: Sequence[tags.Tag]) -> Optional[Link]:
    wanted = SpecifierSet(f"=={version}")
    rank = {tag: place for place, tag in enumerate(accepted)}
    best: Optional[Tuple[Tuple[Version, int, Tuple[object, ...]], Link]] = None
    for link in links:
        try:
            name, found, build, file_tags = parse_wheel_filename(link.filename)
        except InvalidWheelFilename:
            continue
        if name != PROJECT or link.yanked or found not in wanted:
            continue
        if link.requires_python:
            try:
                if not SpecifierSet(link.requires_python).contains(python, prereleases=True):
                    continue
            except InvalidSpecifier:
                pass  # pip ignores a Requires-Python it cannot parse
        places = [rank[tag] for tag in file_tags if tag in rank]
        if not places:
            continue
        key = (found, -min(places), tuple(build))  # pip's order: version, tag, build
        if best is None or key > best[0]:
            best = (key, link)
    return best[1] if best else None


def local_links(directory: Path) -> List[Link]:
    return [Link(entry.name, entry.resolve().as_uri()) for entry in sorted(directory.iterdir())
            if entry.is_file()]


def find_links_page(location: str, transport: Transport) -> List[Link]:
    parts = urllib.parse.urlsplit(location)
    if parts.scheme in ("", "file"):
        path = Path(urllib.request.url2pathname(parts.path) if parts.scheme else location)
        if path.is_dir():
            return local_links(path)
        if path.is_file() and path.suffix == ".whl":
            return [Link(path.name, path.resolve().as_uri())]
        return parse_page(path.read_bytes(), "text/html", path.resolve().as_uri()) \
            if path.is_file() else []
    reply = transport.get(location, PAGE_LIMIT, {"Accept": "text/html"})
    if reply.status != 200:
        raise TransportError(f"{shown_url(location)} answered HTTP {reply.status}")
    return parse_page(reply.body, reply.headers.get("Content-Type", ""), reply.url)


_pages: Dict[str, List[Link]] = {}


def index_page(index: str, transport: Transport) -> List[Link]:
    """The torch page of one index (read once per process: new-base asks
    for many releases); a 404 is an index without torch."""
    if index not in _pages:
        _pages[index] = read_index_page(index, transport)
    return _pages[index]


def read_index_page(index: str, transport: Transport) -> List[Link]:
    page = index.rstrip("/") + f"/{PROJECT}/"
    parts = urllib.parse.urlsplit(page)
    if parts.scheme == "file":
        path = Path(urllib.request.url2pathname(parts.path))
        listing = path / "index.html"
        return parse_page(listing.read_bytes(), "text/html", listing.as_uri()) \
            if listing.is_file() else []
    reply = transport.get(page, PAGE_LIMIT, {"Accept": ACCEPT})
    if reply.status == 404:
        return []
    if reply.status != 200:
        raise TransportError(f"{shown_url(page)} answered HTTP {reply.status}")
    return parse_page(reply.body, reply.headers.get("Content-Type", ""), reply.url)


# What reading a hostile or broken page can raise (html.parser asserts on
# some markup): each ends in the fallback, with the reason.
UNREADABLE = (TransportError, OSError, ValueError, KeyError, TypeError, AttributeError,
              RecursionError, AssertionError)


def offered_links(config: PipConfig, transport: Transport) -> List[Link]:
    """Every torch file pip's configured indexes and find-links offer."""
    links: List[Link] = []
    for index in config.index_urls:
        links += index_page(index, transport)
    for location in config.find_links:
        links += find_links_page(location, transport)
    return links


def find_wheel(version: str, python: str, platform: Optional[str], config: PipConfig,
               transport: Transport) -> Tuple[Optional[Link], str]:
    """The link pip would choose for torch==`version`, or None and why."""
    try:
        Version(version)
    except InvalidVersion:
        return None, f"{version!r} is not a PEP 440 version"
    links: List[Link] = []
    try:
        links = offered_links(config, transport)
        chosen = choose(links, version, python, target_tags(python, platform))
    except UNREADABLE as problem:
        return None, f"the index's simple API could not be read ({one_line(problem)})"
    if chosen is None:
        where = ", ".join(shown_url(url) for url in [*config.index_urls, *config.find_links])
        return None, (f"no torch {version} wheel for this target on {where or 'no index'} "
                      f"({len(links)} torch files listed)")
    return chosen, ""


def newest_final_release(config: PipConfig, transport: Transport) -> Tuple[Optional[str], str]:
    """The newest final torch release (no pre-release, dev or post release;
    a local label, 2.13.0+cpu, names its release) that pip's configured
    indexes and find-links offer a file of, not yanked; or None and why.
    Only the project pages are read: no wheel."""
    try:
        finals = final_releases(offered_links(config, transport))
    except UNREADABLE as problem:
        return None, f"the index's simple API could not be read ({one_line(problem)})"
    if not finals:
        return None, f"no final torch release on {places(config)}"
    return str(max(finals)), ""


def torch_wheels(links: Iterable[Link]) -> Iterator[Tuple[Link, Version]]:
    """Each torch wheel of `links`, with its version (other names skipped)."""
    for link in links:
        try:
            name, found, _, _ = parse_wheel_filename(link.filename)
        except InvalidWheelFilename:
            continue
        if name == PROJECT:
            yield link, found


def final_releases(links: Iterable[Link]) -> List[Version]:
    """The final torch releases `links` offer a wheel of (not yanked; a
    local label names its release), in order."""
    return sorted({Version(found.public) for link, found in torch_wheels(links)
                   if not link.yanked and not (found.is_prerelease or found.is_devrelease
                                               or found.is_postrelease)})


def places(config: PipConfig) -> str:
    return ", ".join(shown_url(url) for url in [*config.index_urls, *config.find_links]) \
        or "no index"


def absent_release(version: str, config: PipConfig, transport: Transport) -> Optional[str]:
    """Why torch `version` cannot be downloaded from pip's indexes and
    find-links, said before any download: they list no file of it at all
    (the nearest releases they do have are named). None where they list
    it, or where their pages cannot be read (pip then says)."""
    try:
        wanted = Version(version)
        links = offered_links(config, transport)
    except (InvalidVersion, *UNREADABLE):
        return None
    if wanted in {found if wanted.local else Version(found.public)
                  for _, found in torch_wheels(links)}:
        return None
    finals = final_releases(links)
    below = [str(v) for v in finals if v < wanted][-1:]
    above = [str(v) for v in finals if v > wanted][:1]
    nearest = " and ".join(below + above)
    return (f"torch {version} is not on {places(config)}"
            + (f"; the nearest releases there: {nearest}" if nearest else
               " (it lists no torch release)"))
