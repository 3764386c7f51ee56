"""Naming a release's wheel downloads no wheel (simple_index.py,
pip_config.py): the wheel pip would choose is read from the indexes'
simple API, JSON or HTML, with pip's own rules (yanked files skipped,
Requires-Python honoured, the target's tags ranked, a local label above
none), and pip's settings are ranked as pip ranks them. Against a local
index, `release_files` reads a few members by range and the server counts
what it sent."""

from __future__ import annotations

import random
import unittest
import zipfile

from packaging import tags

from local_servers import Answer, ranges, Running, Seen, Server, simple_page
from test_hostile_replies import record_line, SOURCE, wheel_zip

from torch_backport.download import simple_index
from torch_backport.download.pip_config import from_options, parse_listing, PYPI
from torch_backport.download.ranged import RangedFile
from torch_backport.download.simple_index import choose, find_wheel, Link, parse_page
from torch_backport.download.transport import Transport
from torch_backport.download.release_wheels import members

LINUX = "manylinux_2_28_x86_64"
MEMBER = "torch/_inductor/config.py"


def accepted(python: str = "3.11", platform: str = LINUX) -> list[tags.Tag]:
    return simple_index.target_tags(python, platform)


def link(name: str, **extra: object) -> Link:
    return Link(name, f"https://files.example/{name}", **extra)  # type: ignore[arg-type]


class ChooseTest(unittest.TestCase):
    def test_the_target_python_and_platform_pick_the_file(self) -> None:
        links = [link(f"torch-2.11.0-cp311-cp311-{LINUX}.whl"),
                 link("torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl"),
                 link("torch-2.11.0-cp311-cp311-win_amd64.whl"),
                 link("torch-2.11.0-cp311-cp311-manylinux_2_28_aarch64.whl")]
        self.assertEqual(choose(links, "2.11.0", "3.11", accepted()), links[0])

    def test_an_older_manylinux_is_taken_as_pip_takes_it(self) -> None:
        older = link("torch-2.11.0-cp311-cp311-manylinux2014_x86_64.whl")
        self.assertEqual(choose([older], "2.11.0", "3.11", accepted()), older)

    def test_an_older_macos_is_taken_for_a_newer_target(self) -> None:
        older = link("torch-2.11.0-cp311-none-macosx_11_0_arm64.whl")
        self.assertEqual(choose([older], "2.11.0", "3.11", accepted(platform="macosx_15_0_arm64")),
                         older)

    def test_a_yanked_file_is_skipped(self) -> None:
        self.assertIsNone(choose([link(f"torch-2.11.0-cp311-cp311-{LINUX}.whl", yanked=True)],
                                 "2.11.0", "3.11", accepted()))

    def test_requires_python_is_honoured(self) -> None:
        self.assertIsNone(choose([link(f"torch-2.11.0-cp311-cp311-{LINUX}.whl",
                                       requires_python=">=3.12")], "2.11.0", "3.11", accepted()))

    def test_a_local_label_sorts_above_none_and_the_build_tag_counts(self) -> None:
        links = [link(f"torch-2.13.0-cp311-cp311-{LINUX}.whl"),
                 link(f"torch-2.13.0+cpu-cp311-cp311-{LINUX}.whl"),
                 link(f"torch-2.10.0-cp311-cp311-{LINUX}.whl"),
                 link(f"torch-2.10.0-3-cp311-cp311-{LINUX}.whl")]
        self.assertEqual([choose(links, "2.13.0", "3.11", accepted()),
                          choose(links, "2.10.0", "3.11", accepted())], [links[1], links[3]])

    def test_other_projects_and_other_versions_are_not_taken(self) -> None:
        self.assertIsNone(choose([link(f"torchvision-2.11.0-cp311-cp311-{LINUX}.whl"),
                                  link(f"torch-2.11.1-cp311-cp311-{LINUX}.whl")],
                                 "2.11.0", "3.11", accepted()))


class ParsePageTest(unittest.TestCase):
    def test_html_anchors_give_the_same_links_as_json(self) -> None:
        name = f"torch-2.11.0-cp311-cp311-{LINUX}.whl"
        html = (f'<a href="../../files/{name}#sha256=ab" data-requires-python="&gt;=3.10" '
                f'data-yanked="">{name}</a>').encode()
        self.assertEqual(parse_page(html, "text/html", "https://i.example/simple/torch/"),
                         [Link(name, f"https://i.example/files/{name}#sha256=ab", ">=3.10",
                               True)])

    def test_json_urls_are_joined_to_the_page(self) -> None:
        name = f"torch-2.11.0-cp311-cp311-{LINUX}.whl"
        self.assertEqual(parse_page(simple_page([(name, f"/files/{name}")]),
                                    "application/vnd.pypi.simple.v1+json",
                                    "http://127.0.0.1:9/simple/torch/"),
                         [Link(name, f"http://127.0.0.1:9/files/{name}", ">=3.9", False)])


class HostilePageTest(unittest.TestCase):
    def find(self, body: bytes) -> tuple[object, str]:
        def handler(server: Server, seen: Seen) -> Answer:
            return 200, {"Content-Type": "application/vnd.pypi.simple.v1+json"}, body

        with Running(handler) as server:
            config = from_options({"index-url": f"{server.base}/simple"})
            return find_wheel("2.11.0", "3.11", LINUX, config, Transport(config))

    def test_pages_of_the_wrong_shape_say_why_and_raise_nothing(self) -> None:
        name = f"torch-2.11.0-cp311-cp311-{LINUX}.whl"
        for body in (b"[]", b"[" * 200000, b'{"files": 5}',
                     b'{"files": [{"filename": "%s", "url": 5, "requires-python": 5}]}'
                     % name.encode()):
            with self.subTest(body=body[:40]):
                found, why = self.find(body)
                self.assertIsNone(found)
                self.assertRegex(why, r"could not be read|no torch 2\.11\.0 wheel")

    def test_a_remote_page_cannot_name_a_local_file(self) -> None:
        name = f"torch-2.11.0-cp311-cp311-{LINUX}.whl"
        found, why = self.find(simple_page([(name, f"file:///tmp/{name}")]))
        self.assertEqual((found, why.split(" (")[-1]), (None, "0 torch files listed)"))

    def test_a_version_that_is_not_pep_440_is_said(self) -> None:
        config = from_options({"no-index": "1"})
        self.assertEqual(find_wheel("2.12.1x", "3.11", LINUX, config, Transport(config)),
                         (None, "'2.12.1x' is not a PEP 440 version"))


class PipSettingsTest(unittest.TestCase):
    def test_the_environment_outranks_download_which_outranks_global(self) -> None:
        listing = ("global.index-url='https://global.example/simple'\n"
                   "download.index-url='https://download.example/simple'\n"
                   ":env:.index-url='https://env.example/simple'\n"
                   "global.trusted-host='a.example\\nb.example'\n"
                   "install.cert='/not/for/download'\n")
        options = parse_listing(listing)
        self.assertEqual((options["index-url"], options["trusted-host"], "cert" in options),
                         ("https://env.example/simple", "a.example\nb.example", False))

    def test_no_index_leaves_only_find_links(self) -> None:
        config = from_options({"no-index": "1", "find-links": "/opt/wheels"})
        self.assertEqual((config.index_urls, config.find_links), ((), ("/opt/wheels",)))

    def test_pypi_is_the_index_when_none_is_configured(self) -> None:
        self.assertEqual(from_options({}).index_urls, (PYPI,))


class IndexOverHttpTest(unittest.TestCase):
    def test_a_release_is_named_and_read_by_range_without_its_whole_wheel(self) -> None:
        filler = "torch/lib/filler.bin"
        big = random.Random(0).randbytes(4 * 1024 * 1024)  # does not compress
        data = wheel_zip({MEMBER: SOURCE, filler: big},
                         [record_line(MEMBER, SOURCE), record_line(filler, big)])
        name = f"torch-2.11.0-cp311-cp311-{LINUX}.whl"

        def handler(server: Server, seen: Seen) -> Answer:
            if seen.path == "/simple/torch/":
                return 200, {"Content-Type": "application/vnd.pypi.simple.v1+json"}, \
                    simple_page([(name, f"/files/{name}")])
            return ranges(data, seen.headers.get("Range"))

        with Running(handler) as server:
            config = from_options({"index-url": f"{server.base}/simple"})
            transport = Transport(config)
            found, why = find_wheel("2.11.0", "3.11", LINUX, config, transport)
            self.assertEqual((found and found.url, why), (f"{server.base}/files/{name}", ""))
            remote = RangedFile(found.url, transport)  # type: ignore[union-attr]
            with zipfile.ZipFile(remote) as wheel:
                self.assertEqual(members(wheel, [MEMBER], "test"), {MEMBER: SOURCE})
        self.assertLess(server.sent, len(data) // 4)
        self.assertEqual(transport.received, server.sent)


if __name__ == "__main__":
    unittest.main()
