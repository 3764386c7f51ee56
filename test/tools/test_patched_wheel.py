"""scripts/apply.sh --wheel IN --out DIR on small torch wheels.

The fake wheels (fake_wheel.py) hold the stock 2.11.0 (and 2.12.0) files the
topics touch. Building one patched wheel from such a wheel takes well under
a second, so every rule and every refusal has its own test here; the real
2.11.0 wheel is built, installed and run in scripts/test.sh's wheel job
(test/dynamo/test_installed_patched_wheel.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import expecttest
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from wheel.wheelfile import WheelFile

import torch_backport.patchset.series as model
from torch_backport.patchset.apply import apply_series
from torch_backport.patchset.identify import topic_files
from fake_install import BUILT_NAME, ScratchTestCase, source_python, STOCK, UPSTREAM
from fake_wheel import make_fake_wheel, release_files, run_wheel, tampered, TAG

LABEL_RE = r"pregrad\.g[0-9a-f]{10}"
CONFIG = "torch/_inductor/config.py"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class PatchedWheelTest(ScratchTestCase):
    scratch_prefix = "pregrad-patched-wheel-"
    maxDiff = None
    stock_files: dict[str, bytes]

    @classmethod
    def setUpClass(cls) -> None:
        cls.stock_files = release_files(source_python(STOCK))

    def stock_wheel(self, version: str = "2.11.0", name: str = "torch") -> Path:
        return make_fake_wheel(self.tmp / "in", self.stock_files, version, name)

    def build(self, wheel: Path, *args: str, out: str = "out") -> tuple[int, str, list[Path]]:
        code, output = run_wheel("--wheel", str(wheel), "--out", str(self.tmp / out), *args)
        written = sorted((self.tmp / out).iterdir()) if (self.tmp / out).exists() else []
        return code, output.replace(str(self.tmp), "<tmp>"), written

    def built(self, *args: str, out: str = "out") -> Path:
        code, output, written = self.build(self.stock_wheel(), *args, out=out)
        self.assertEqual(code, 0, output)
        (wheel,) = written
        return wheel

    # What a patched wheel is.

    def test_the_file_name_carries_the_local_label(self) -> None:
        self.assertRegex(self.built().name, rf"^torch-2\.11\.0\+{LABEL_RE}-{TAG}\.whl$")

    def test_the_label_names_the_series_applied(self) -> None:
        default, every = self.built(), self.built("--topic", "all", out="all")
        digest = hashlib.sha256()
        for topic in model.select_topics(None):
            series = model.load_series("v2.11.0", topic)
            digest.update(f"{topic.name}\0{series.base}\0".encode())
            for patch in series.patches:
                digest.update(patch.read_bytes())
        self.assertIn(f"+pregrad.g{digest.hexdigest()[:10]}-", default.name)
        self.assertNotEqual(default.name, every.name)

    def test_every_file_matches_the_new_record(self) -> None:
        with WheelFile(str(self.built())) as wheel:  # it checks each read against RECORD
            names = [info.filename for info in wheel.infolist()]
            for name in names:
                wheel.read(name)
            record = wheel.read(wheel.record_path).decode()
        listed = [line.split(",", 1)[0] for line in record.splitlines()]
        self.assertEqual(sorted(listed), sorted(names))

    def test_the_dist_info_is_renamed_and_metadata_has_the_version(self) -> None:
        wheel_path = self.built()
        version = wheel_path.name.split("-")[1]
        with WheelFile(str(wheel_path)) as wheel:
            names = wheel.namelist()
            metadata = wheel.read(f"torch-{version}.dist-info/METADATA").decode()
        self.assertEqual(sorted({name.split("/")[0] for name in names if ".dist-info/" in name}),
                         [f"torch-{version}.dist-info"])
        self.assertIn(f"\nVersion: {version}\n", metadata)

    def test_the_patched_files_are_what_the_series_makes(self) -> None:
        with WheelFile(str(self.built())) as wheel:
            inside = {rel: wheel.read(rel) for rel in self.stock_files}
        expected = dict(self.stock_files)
        for series in model.load_topic_series("v2.11.0", model.select_topics(None)):
            expected.update(apply_series(
                {rel: self.stock_files[rel] for rel in series.touched}, series))
        self.assertEqual(inside, expected)

    def test_the_wheel_says_what_it_was_built_from(self) -> None:
        source = self.stock_wheel()
        wheel_path = self.built()
        version = wheel_path.name.split("-")[1]
        with WheelFile(str(wheel_path)) as wheel:
            built = json.loads(wheel.read(f"torch-{version}.dist-info/{BUILT_NAME}"))
        self.assertEqual(built["from"], {"wheel": source.name, "sha256": sha256(source),
                                         "version": "2.11.0"})
        self.assertEqual(sorted(built["topics"]),
                         sorted(topic.name for topic in model.select_topics(None)))
        self.assertEqual(built["topics"]["pre-grad-pass-timing"]["base"], "v2.11.0")

    def test_the_same_inputs_give_the_same_bytes(self) -> None:
        source = self.stock_wheel()
        first = self.build(source, out="first")[2]
        second = self.build(source, out="second")[2]
        self.assertEqual([path.name for path in first], [path.name for path in second])
        self.assertEqual(sha256(first[0]), sha256(second[0]))

    def test_a_release_s_own_local_label_is_kept(self) -> None:
        code, output, written = self.build(self.stock_wheel("2.11.0+cpu"))
        self.assertEqual(code, 0, output)
        self.assertRegex(written[0].name, rf"^torch-2\.11\.0\+cpu\.{LABEL_RE}-")

    def test_torch_eq_the_release_accepts_the_version(self) -> None:
        version = Version(self.built().name.split("-")[1])
        self.assertIn(version, SpecifierSet("==2.11.0"))
        self.assertNotIn(version, SpecifierSet("==2.11.1"))

    def test_a_release_with_the_feature_gets_its_results_fixes(self) -> None:
        upstream = release_files(source_python(UPSTREAM))
        code, output, written = self.build(make_fake_wheel(self.tmp / "in", upstream, "2.12.0"))
        self.assertEqual(code, 0, output)
        self.assertIn("applying patches/v2.12.0\n", output)
        self.assertRegex(written[0].name, rf"^torch-2\.12\.0\+{LABEL_RE}-")

    def test_check_writes_nothing(self) -> None:
        code, output, written = self.build(self.stock_wheel(), "--check")
        self.assertEqual(code, 0, output)
        self.assertRegex(output, r"check: would write <tmp>/out/torch-2\.11\.0\+pregrad")
        self.assertEqual(written, [])

    # Refused inputs write nothing.

    def assert_refused(self, wheel: Path, message: str) -> None:
        code, output, written = self.build(wheel, out="refused")
        self.assertEqual(code, 1, output)
        self.assertIn(message, output)
        self.assertIn("nothing was written", output)
        self.assertEqual(written, [])
        self.assertFalse((self.tmp / "refused").exists())

    def test_a_windows_wheel_with_crlf_endings_is_served_by_content(self) -> None:
        crlf = {rel: data.replace(b"\n", b"\r\n") for rel, data in self.stock_files.items()}
        wheel = make_fake_wheel(self.tmp / "in", crlf, "2.11.0")
        code, output, written = self.build(wheel)
        self.assertEqual(code, 0, output)
        self.assertIn("have CRLF line endings (a Windows wheel): identified and patched as "
                      "LF, written with CRLF", output)
        self.assertIn("byte-identical to v2.11.0's: applying patches/v2.11.0", output)
        (made,) = written
        lf_made = self.built(out="lf")
        with WheelFile(str(made)) as windows, WheelFile(str(lf_made)) as linux:
            for rel in topic_files(model.primary_topic()):
                data = windows.read(rel)  # checked against the new RECORD
                self.assertNotIn(b"\n", data.replace(b"\r\n", b""), rel)
                self.assertEqual(data, linux.read(rel).replace(b"\n", b"\r\n"), rel)

    def test_a_lock_for_a_wheel_of_another_platform_is_refused_before_building(self) -> None:
        wheel = make_fake_wheel(self.tmp / "in", self.stock_files, "2.11.0",
                                tag="cp311-cp311-macosx_11_0_arm64")
        code, output, written = self.build(wheel, "--lock", str(self.tmp / "requirements.txt"))
        self.assertEqual(code, 1, output)
        self.assertIn("--lock resolves for the Python and platform that run it, and "
                      "torch-2.11.0-cp311-cp311-macosx_11_0_arm64.whl is for another "
                      "(cp311-cp311-macosx_11_0_arm64)", output)
        self.assertEqual(written, [])
        self.assertFalse((self.tmp / "requirements.txt").exists())

    def test_a_real_difference_in_a_crlf_wheel_is_refused(self) -> None:
        crlf = {rel: data.replace(b"\n", b"\r\n") for rel, data in self.stock_files.items()}
        crlf[CONFIG] += b"# vendor\r\n"
        code, output, written = self.build(make_fake_wheel(self.tmp / "in", crlf, "2.11.0"))
        self.assertEqual(code, 1, output)
        self.assertIn(f"{CONFIG} differs", output)
        self.assertEqual(written, [])

    def test_a_file_that_does_not_match_record_is_refused(self) -> None:
        self.assert_refused(tampered(self.stock_wheel(), CONFIG, self.tmp / "tampered"),
                            f"{CONFIG} does not match the wheel's RECORD")

    def test_a_release_without_a_series_is_refused(self) -> None:
        vendor = dict(self.stock_files)
        vendor[CONFIG] += b"# a vendor's edit\n"
        self.assert_refused(make_fake_wheel(self.tmp / "in", vendor, "2.11.0"),
                            "torch 2.11.0: no series matches its files")

    def test_a_wheel_of_another_project_is_refused(self) -> None:
        self.assert_refused(self.stock_wheel(name="numpy"),
                            "numpy-2.11.0-cp311-cp311-linux_x86_64.whl is not a torch wheel")

    def test_a_patched_wheel_is_refused(self) -> None:
        patched = self.built()
        self.assert_refused(patched, f"{patched.name} is already a patched wheel")

    def test_a_file_that_is_not_a_wheel_is_refused(self) -> None:
        not_a_wheel = self.tmp / "torch-2.11.0-cp311-cp311-linux_x86_64.whl"
        not_a_wheel.write_bytes(b"not a zip\n")
        self.assert_refused(not_a_wheel, "not a wheel")

    def test_a_missing_file_is_refused(self) -> None:
        code, output, written = self.build(self.tmp / "no-such.whl")
        self.assertEqual((code, written), (1, []))
        self.assertIn("<tmp>/no-such.whl: no such wheel file", output)

    def test_usage_errors(self) -> None:
        results = "".join(
            f"$ apply.sh {' '.join(args)}\n[{code}] {output}"
            for args in [("--wheel",), ("--wheel", "torch==2.11.0"),
                         ("--wheel", "torch==2.11.0", "--out", "d", "--python", "py"),
                         ("--wheel", "torch==2.11.0", "--status")]
            for code, output in [run_wheel(*args)])
        self.assertExpectedInline(results, """\
$ apply.sh --wheel
[2] scripts/apply.sh: --wheel needs a torch wheel file or torch==X
(see scripts/apply.sh --help)
$ apply.sh --wheel torch==2.11.0
[2] scripts/apply.sh: --wheel needs --out DIR
(see scripts/apply.sh --help)
$ apply.sh --wheel torch==2.11.0 --out d --python py
[2] scripts/apply.sh: --wheel and --python do not go together (the wheel is read, not installed)
(see scripts/apply.sh --help)
$ apply.sh --wheel torch==2.11.0 --status
[2] scripts/apply.sh: --wheel and --status do not go together
(see scripts/apply.sh --help)
""")


class InstalledPatchedWheelTest(expecttest.TestCase):
    """A venv with pip, the fake patched wheel installed into it by pip: made
    once for the class (a venv with pip takes seconds); no test changes what
    the others look at (the one that installs a dependent only adds it)."""
    maxDiff = None
    tmp: Path
    python: Path

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        scratch = tempfile.TemporaryDirectory(prefix="pregrad-patched-wheel-install-")
        cls.addClassCleanup(scratch.cleanup)
        cls.tmp = Path(scratch.name)
        source = make_fake_wheel(cls.tmp / "in", release_files(source_python(STOCK)), "2.11.0")
        code, output = run_wheel("--wheel", str(source), "--out", str(cls.tmp / "dist"))
        if code != 0:
            raise AssertionError(f"building the patched wheel failed: {output}")
        (wheel,) = (cls.tmp / "dist").iterdir()
        subprocess.run([sys.executable, "-m", "venv", str(cls.tmp / "venv")], check=True)
        cls.python = cls.tmp / "venv" / "bin" / "python"
        subprocess.run([str(cls.python), "-m", "pip", "--disable-pip-version-check", "install",
                        "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True)

    def pip(self, *args: str) -> str:
        result = subprocess.run([str(self.python), "-m", "pip", "--disable-pip-version-check",
                                 *args], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        return result.stdout

    def apply(self, *args: str) -> tuple[int, str]:
        code, output = run_wheel("--python", str(self.python), *args)
        return code, re.sub(r"\S*/venv/", "<venv>/", output.replace(str(self.tmp), "<tmp>"))

    def test_status_says_installed_from_a_patched_wheel(self) -> None:
        code, output = self.apply("--status")
        self.assertEqual(code, 0, output)
        self.assertEqual(output.count("patched: installed from a patched wheel (built from "
                                      "torch-2.11.0-cp311-cp311-linux_x86_64.whl"), 2, output)

    def test_apply_has_nothing_to_do(self) -> None:
        code, output = self.apply()
        self.assertEqual(code, 0, output)
        self.assertEqual(output.count("already applied: installed from a patched wheel"), 2)

    def test_revert_refuses_and_names_the_stock_wheel(self) -> None:
        code, output = self.apply("--revert")
        self.assertEqual(code, 1, output)
        self.assertIn("there are no backups to revert to, and nothing was changed; install the "
                      "stock wheel instead: <venv>/bin/python -m pip install --force-reinstall "
                      "--no-deps torch==2.11.0", output)

    def test_pip_check_passes(self) -> None:
        self.assertIn("No broken requirements found.", self.pip("check"))

    def test_a_requirement_of_torch_eq_the_release_is_met(self) -> None:
        """As torchvision's torch==2.11.0: pip resolves it against the install."""
        index = self.tmp / "index"
        make_fake_wheel(index, {"dependent/__init__.py": b""}, "1.0", name="dependent",
                        requires=("torch==2.11.0",))
        self.pip("install", "--no-index", "--find-links", str(index), "dependent")
        self.assertIn("No broken requirements found.", self.pip("check"))


if __name__ == "__main__":
    unittest.main()
