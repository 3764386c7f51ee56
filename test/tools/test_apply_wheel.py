"""scripts/apply.sh on installed wheels: one scenario per behaviour.

Each test builds a small real install (fake_install.py) from the files of a
real torch venv, runs apply.sh against it as a user would, checks the output
as expected text and compares the bytes on disk before and after.
"""

from __future__ import annotations

import hashlib
import json
import unittest

from fake_install import (AUTOCAST, BACKUPS, BASES, FAULT, INSTALLED,
                          InstallTestCase, MANIFEST, make_fake_install, REPO, source_python,
                          STATE_DIRNAME, STOCK, torch_site, TOUCHED, UPSTREAM)


class ApplyWheelTest(InstallTestCase):
    scratch_prefix = "pregrad-wheel-test-"

    def patched_bytes(self) -> dict[str, bytes]:
        """What the series makes of the pristine files, via the overlay."""
        install = make_fake_install(self.tmp / "overlay-source", source_python(STOCK))
        out = self.tmp / "overlay"
        code, output = install.run("--overlay", "v2.11.0", "--out", str(out))
        self.assertEqual(code, 0, output)
        return {rel: (out / rel).read_bytes() for rel in TOUCHED}

    def test_status_json_is_one_object_that_follows_the_install(self) -> None:
        install = self.install()
        code, output = install.run("--status", "--json")
        self.assertEqual(code, 0, output)
        found = json.loads(output)
        self.assertEqual([(t["topic"], t["state"], t["exit_code"], t["base"])
                          for t in found["topics"]],
                         [("pre-grad-pass-timing", "pristine", 0, "v2.11.0"),
                          ("autocast-cache-key", "pristine", 0, "v2.11.0"),
                          ("cpu-isa-probe", "pristine", 0, "v2.11.0")])
        self.assertEqual(found["topics"][0]["files"]["torch/_inductor/config.py"], "pristine")
        self.assertEqual((found["exit_code"], found["partly_applied"]), (0, []))
        code, output = install.run("--status", "--json", "--expect", "patched")
        self.assertEqual(code, 1, output)
        self.assertFalse(json.loads(output)["expect_patched"]["met"])
        self.assertEqual(install.run()[0], 0)
        code, output = install.run("--status", "--json", "--expect", "patched")
        self.assertEqual(code, 0, output)
        found = json.loads(output)
        self.assertEqual([t["state"] for t in found["topics"]],
                         ["patched", "patched", "pristine"])  # cpu-isa-probe: opt-in
        self.assertEqual(found["expect_patched"], {"met": True, "why": []})
        self.assertEqual(install.run("--json")[1],
                         "scripts/apply.sh: --json goes with --status on an install "
                         "(--python PY)\n(see scripts/apply.sh --help)\n")

    def test_status_of_a_pristine_install(self) -> None:
        install = self.install()
        code, output = install.run("--status")
        self.assertEqual(code, 0)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.11.0, 8 patches)
  pristine  torch/_functorch/aot_autograd.py
  pristine  torch/_inductor/codecache.py
  pristine  torch/_inductor/compile_fx.py
  pristine  torch/_inductor/config.py
  pristine  torch/_inductor/fx_passes/pre_grad.py
pristine: every file the series touches matches torch's RECORD

torch 2.11.0 in <site> (base v2.11.0, topic autocast-cache-key, 2 patches)
  pristine  torch/_functorch/_aot_autograd/autograd_cache.py
pristine: every file the series touches matches torch's RECORD

torch 2.11.0 in <site> (base v2.11.0, topic cpu-isa-probe, 3 patches)
  pristine  torch/_inductor/cpu_vec_isa.py
pristine: every file the series touches matches torch's RECORD
""")

    def test_check_writes_nothing(self) -> None:
        install = self.install()
        before = install.snapshot()
        code, output = install.run("--check")
        self.assertEqual(code, 0)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.11.0, 8 patches)
  would patch torch/_functorch/aot_autograd.py
  would patch torch/_inductor/codecache.py
  would patch torch/_inductor/compile_fx.py
  would patch torch/_inductor/config.py
  would patch torch/_inductor/fx_passes/pre_grad.py
check: the series applies cleanly; 5 file(s) would change, nothing was written
torch 2.11.0 in <site> (base v2.11.0, topic autocast-cache-key, 2 patches)
  would patch torch/_functorch/_aot_autograd/autograd_cache.py
check: the series applies cleanly; 1 file(s) would change, nothing was written
""")
        self.assertEqual(install.snapshot(), before)

    def test_apply_writes_the_patched_files_and_keeps_the_originals(self) -> None:
        install = self.install()
        before = install.snapshot()
        code, output = install.run()
        self.assertEqual(code, 0, output)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.11.0, 8 patches)
  patched torch/_functorch/aot_autograd.py
  patched torch/_inductor/codecache.py
  patched torch/_inductor/compile_fx.py
  patched torch/_inductor/config.py
  patched torch/_inductor/fx_passes/pre_grad.py
applied 8 patches to 5 files; originals kept in <site>/.torch-pregrad-backport
torch 2.11.0 in <site> (base v2.11.0, topic autocast-cache-key, 2 patches)
  patched torch/_functorch/_aot_autograd/autograd_cache.py
applied 2 patches to 1 files; originals kept in <site>/.torch-pregrad-backport-autocast-cache-key
""")
        patched = self.patched_bytes()
        for rel in TOUCHED:
            self.assertNotEqual(install.path(rel).read_bytes(), before[rel], rel)
            self.assertEqual(install.path(rel).read_bytes(), patched[rel], rel)
            self.assertEqual(
                (install.site / STATE_DIRNAME / BACKUPS / rel).read_bytes(), before[rel]
            )
        code, output = install.run("--status")
        self.assertEqual(code, 0)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.11.0, 8 patches)
  patched   torch/_functorch/aot_autograd.py
  patched   torch/_inductor/codecache.py
  patched   torch/_inductor/compile_fx.py
  patched   torch/_inductor/config.py
  patched   torch/_inductor/fx_passes/pre_grad.py
patched: the series is applied (revert with --revert)

torch 2.11.0 in <site> (base v2.11.0, topic autocast-cache-key, 2 patches)
  patched   torch/_functorch/_aot_autograd/autograd_cache.py
patched: the series is applied (revert with --revert --topic autocast-cache-key)

torch 2.11.0 in <site> (base v2.11.0, topic cpu-isa-probe, 3 patches)
  pristine  torch/_inductor/cpu_vec_isa.py
pristine: every file the series touches matches torch's RECORD
""")

    def test_an_earlier_series_is_replaced_by_apply(self) -> None:
        """An install patched by an older version of this project's series
        (recorded in the manifest) is 'outdated'; apply swaps in the current one."""
        install = self.install()
        self.assertEqual(install.run()[0], 0)
        manifest_path = install.site / STATE_DIRNAME / MANIFEST
        manifest = json.loads(manifest_path.read_text())
        manifest["series"] = {"0001-older.patch": "0" * 64}
        manifest_path.write_text(json.dumps(manifest))
        code, output = install.run("--status")
        self.assertEqual(code, 1)
        self.assertIn("outdated: an earlier version of the series is applied", output)
        code, output = install.run()
        self.assertEqual(code, 0, output)
        self.assertIn("an earlier version of the series was applied: restored the wheel's "
                      "files, now applying this one", output)
        self.assertEqual(install.run("--status")[0], 0)
        self.assertEqual({rel: install.path(rel).read_bytes() for rel in TOUCHED},
                         self.patched_bytes())

    def test_second_apply_is_a_no_op(self) -> None:
        install = self.install()
        self.assertEqual(install.run()[0], 0)
        after_first = install.snapshot()
        code, output = install.run()
        self.assertEqual(code, 0)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.11.0, 8 patches)
already applied: nothing to do
torch 2.11.0 in <site> (base v2.11.0, topic autocast-cache-key, 2 patches)
already applied: nothing to do
""")
        self.assertEqual(install.snapshot(), after_first)

    def test_revert_restores_the_wheel_byte_for_byte(self) -> None:
        install = self.install()
        before = install.snapshot()
        self.assertEqual(install.run()[0], 0)
        code, output = install.run("--revert")
        self.assertEqual(code, 0, output)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.11.0, 8 patches)
  restored torch/_functorch/aot_autograd.py
  restored torch/_inductor/codecache.py
  restored torch/_inductor/compile_fx.py
  restored torch/_inductor/config.py
  restored torch/_inductor/fx_passes/pre_grad.py
reverted: 5 file(s) are byte-identical to torch's RECORD again
torch 2.11.0 in <site> (base v2.11.0, topic autocast-cache-key, 2 patches)
  restored torch/_functorch/_aot_autograd/autograd_cache.py
reverted: 1 file(s) are byte-identical to torch's RECORD again
""")
        self.assertEqual(install.snapshot(), before)

    def test_revert_check_writes_nothing(self) -> None:
        install = self.install()
        self.assertEqual(install.run()[0], 0)
        patched = install.snapshot()
        code, output = install.run("--revert", "--check")
        self.assertEqual(code, 0)
        self.assertIn("check: nothing was written", output)
        self.assertEqual(install.snapshot(), patched)

    def test_revert_of_a_pristine_install_is_a_no_op(self) -> None:
        install = self.install()
        before = install.snapshot()
        code, output = install.run("--revert")
        self.assertEqual(code, 0)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.11.0, 8 patches)
nothing to revert: pristine
torch 2.11.0 in <site> (base v2.11.0, topic autocast-cache-key, 2 patches)
nothing to revert: pristine
""")
        self.assertEqual(install.snapshot(), before)

    def test_apply_refuses_a_modified_install_and_changes_nothing(self) -> None:
        install = self.install()
        config = install.path("torch/_inductor/config.py")
        config.write_bytes(config.read_bytes() + b"\n# local edit\n")
        before = install.snapshot()
        code, output = install.run()
        self.assertEqual(code, 1)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.11.0, 8 patches)
scripts/apply.sh: files differ from torch's RECORD, so nothing was changed:
  <site>/torch/_inductor/config.py: differs from the wheel and the series
reinstall torch (<python> -m pip install --force-reinstall --no-deps torch==2.11.0) or undo the local edits
""")  # noqa: E501 (the real output)
        self.assertEqual(install.snapshot(), before)

    def test_revert_refuses_files_changed_after_patching(self) -> None:
        install = self.install()
        self.assertEqual(install.run()[0], 0)
        codecache = install.path("torch/_inductor/codecache.py")
        codecache.write_bytes(codecache.read_bytes() + b"\n# edited later\n")
        before = install.snapshot()
        code, output = install.run("--revert")
        self.assertEqual(code, 1)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.11.0, 8 patches)
scripts/apply.sh: files changed after the series was applied, so nothing was reverted:
  <site>/torch/_inductor/codecache.py: differs from the wheel and the series
reinstall torch (<python> -m pip install --force-reinstall --no-deps torch==2.11.0) to get the wheel's files back
""")  # noqa: E501 (the real output)
        self.assertEqual(install.snapshot(), before)

    def test_release_with_the_feature_gets_the_results_fixes(self) -> None:
        """2.12.0 has pre_grad_pass_timing; its series carries only the two
        results fixes, applied and reverted like any other base's."""
        install = self.install(UPSTREAM)
        before = install.snapshot()
        code, output = install.run()
        self.assertEqual(code, 0, output)
        self.assertExpectedInline(output, """\
torch 2.12.0 in <site> (base v2.12.0, 2 patches)
  patched torch/_functorch/aot_autograd.py
  patched torch/_inductor/fx_passes/pre_grad.py
applied 2 patches to 2 files; originals kept in <site>/.torch-pregrad-backport
torch 2.12.0 in <site> (base v2.12.0, topic autocast-cache-key, 3 patches)
  patched torch/_functorch/_aot_autograd/autograd_cache.py
applied 3 patches to 1 files; originals kept in <site>/.torch-pregrad-backport-autocast-cache-key
""")
        code, output = install.run("--revert")
        self.assertEqual(code, 0, output)
        self.assertEqual(install.snapshot(), before)

    def test_release_this_project_has_not_seen_is_refused_naming_the_defect(self) -> None:
        # As 2.16.0 will be on the day it ships: files of no release here, with the feature.
        install = self.install(UPSTREAM, version="2.16.0",
                               vendor_edits={TOUCHED[0]: b"# a later release\n",
                                             AUTOCAST: b"# a later release\n"})
        before = install.snapshot()
        code, output = install.run()
        self.assertEqual(code, 1, output)
        self.assertIn("scripts/apply.sh: unseen: torch 2.16.0 has the feature "
                      "(torch._inductor.config.pre_grad_pass_timing already exists), but this "
                      "version of torch-pregrad-backport has no series for its files", output)
        self.assertIn("The results defect is known on every release from 2.12.0 through "
                      "2.15.0, the newest tested", output)
        self.assertIn("scripts/new-base 2.16.0 --python <python>", output)
        self.assertIn("Nothing was changed.", output)
        self.assertEqual(install.snapshot(), before)
        code, output = install.run("--status")
        self.assertEqual(code, 3, output)
        self.assertIn("\nunseen: torch 2.16.0 has the feature", output)
        self.assertIn("(topic autocast-cache-key)\nnot available for this release:", output)
        code, output = install.run("--status", "--json")
        self.assertEqual(code, 3, output)
        found = json.loads(output)
        self.assertEqual(found["exit_code"], 3)
        self.assertEqual(found["topics"][0]["state"], "unseen")
        self.assertIn("has the feature", found["topics"][0]["says"])
        self.assertEqual(found["topics"][1]["state"], "not available")

    def test_expect_patched_fails_after_a_reinstall(self) -> None:
        """pip install --force-reinstall over a patched install puts the
        wheel's files back and leaves the state directory: plain --status
        says pristine (exit 0); the guard does not accept it."""
        install = self.install()
        self.assertEqual(install.run()[0], 0)
        code, output = install.run("--status", "--expect", "patched")
        self.assertEqual(code, 0, output)
        self.assertIn("expected patched: every default topic is applied or upstream's", output)
        stock = torch_site(source_python(STOCK))
        for rel in INSTALLED:  # what the reinstall writes
            install.path(rel).unlink()
            install.path(rel).write_bytes((stock / rel).read_bytes())
        code, output = install.run("--status")
        self.assertEqual(code, 0, output)
        code, output = install.run("--status", "--expect", "patched")
        self.assertEqual(code, 1, output)
        self.assertIn("expected patched: pre-grad-pass-timing is pristine; "
                      "autocast-cache-key is pristine", output)

    def test_version_string_does_not_choose_the_series(self) -> None:
        """A build that calls itself 2.11.0 but holds 2.12.0's files gets
        v2.12.0's series: the bytes decide."""
        install = self.install(UPSTREAM, version="2.11.0")
        code, output = install.run("--check")
        self.assertEqual(code, 0, output)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.12.0, 2 patches)
torch 2.11.0: the 2 files the series touches are byte-identical to v2.12.0's: applying patches/v2.12.0
  would patch torch/_functorch/aot_autograd.py
  would patch torch/_inductor/fx_passes/pre_grad.py
check: the series applies cleanly; 2 file(s) would change, nothing was written
torch 2.11.0 in <site> (base v2.12.0, topic autocast-cache-key, 3 patches)
torch 2.11.0: the one file the series touches is byte-identical to v2.12.0's: applying patches/v2.12.0/autocast-cache-key
  would patch torch/_functorch/_aot_autograd/autograd_cache.py
check: the series applies cleanly; 1 file(s) would change, nothing was written
""")  # noqa: E501 (the real output)

    def test_vendor_build_that_has_the_feature_is_refused_as_unseen(self) -> None:
        """A vendor 2.11.0 build that cherry-picked the feature: its files are
        no release's, and upstream's feature carries the results defect;
        decided by the code, not the version string."""
        install = self.install(UPSTREAM, version="2.11.0",
                               vendor_edits={TOUCHED[0]: b"# vendor build\n"})
        before = install.snapshot()
        code, output = install.run("--topic", "pre-grad-pass-timing")
        self.assertEqual(code, 1, output)
        self.assertIn("scripts/apply.sh: unseen: torch 2.11.0 has the feature", output)
        self.assertEqual(install.snapshot(), before)

    def test_files_of_no_base_are_refused_naming_the_files_that_differ(self) -> None:
        install = self.install(version="2.8.0",
                               vendor_edits={"torch/_inductor/config.py": b"# 2.8\n"})
        before = install.snapshot()
        code, output = install.run()
        self.assertEqual(code, 1)
        self.assertEqual(output, f"""\
torch 2.8.0 in <site>
scripts/apply.sh: torch 2.8.0 is not a supported base: its files match no base's (4 of 5 files the \
series touches are identical to v2.11.0's, the closest base; torch/_inductor/config.py \
differs) (supported: {BASES}); nothing was changed
""")
        self.assertEqual(install.snapshot(), before)

    def test_interrupted_apply_is_finished_by_the_next_apply(self) -> None:
        install = self.install()
        # Steps 0-17 stage: the staging and backup directories (0, 1), the
        # backups and the directories they need (2-10), the manifests (11,
        # 12) and the temporary copies (13-17); 18 renames the state dir into
        # place; 19 on put the patched files and their bytecode in place.
        code, _ = install.run(env={FAULT: "kill:20"})
        self.assertEqual(code, 137)
        code, output = install.run()
        self.assertEqual(code, 0, output)
        self.assertIn("rolled back an interrupted applying run", output)
        self.assertEqual(install.run("--status")[0], 0)
        self.assertEqual(
            {rel: install.path(rel).read_bytes() for rel in TOUCHED}, self.patched_bytes()
        )

    def test_overlay_matches_the_patched_install_and_its_stamp(self) -> None:
        install = self.install()
        out = self.tmp / "overlay"
        code, output = install.run("--overlay", "v2.11.0", "--out", str(out))
        self.assertEqual(code, 0, output)
        self.assertEqual(install.run()[0], 0)
        sums = (out / "SHA256SUMS").read_text().splitlines()
        # The default topics: pre-grad-pass-timing and autocast-cache-key.
        self.assertEqual([line.split("  ")[1] for line in sums], sorted(TOUCHED + [AUTOCAST]))
        for line in sums:
            digest, rel = line.split("  ")
            self.assertEqual((out / rel).read_bytes(), install.path(rel).read_bytes())
            self.assertEqual(hashlib.sha256((out / rel).read_bytes()).hexdigest(), digest)
        stamp = (out / "STAMP").read_text()
        self.assertTrue(stamp.startswith("base: v2.11.0\n"), stamp)
        for patch in (REPO / "patches" / "v2.11.0").glob("*.patch"):
            self.assertIn(hashlib.sha256(patch.read_bytes()).hexdigest(), stamp)

    def test_overlay_refuses_a_directory_it_did_not_fill(self) -> None:
        """--out pointed at site-packages (or anything with other files) must not
        delete what is there."""
        install = self.install()
        before = install.snapshot()
        code, output = install.run("--overlay", "v2.11.0", "--out", str(install.site))
        self.assertEqual(code, 1)
        self.assertIn("holds files that this script did not generate", output)
        self.assertIn("nothing was written", output)
        self.assertEqual(install.snapshot(), before)

    def test_usage_errors_exit_2(self) -> None:
        install = self.install()
        code, output = install.run("--frobnicate")
        self.assertEqual(code, 2)
        self.assertExpectedInline(output, """\
scripts/apply.sh: unknown argument: --frobnicate
(see scripts/apply.sh --help)
""")


if __name__ == "__main__":
    unittest.main()
