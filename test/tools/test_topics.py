"""Topics: each a series per base, applied, reported and reverted on its own.

The default topic (pre-grad-pass-timing) must behave exactly as before there
were topics; the opt-in cpu-isa-probe topic goes through the same code path,
on a wheel, a checkout and an overlay. Installs and checkouts are the small
real ones of fake_install.py and checkout_repo.py.
"""

from __future__ import annotations

import re
import shutil
import unittest

import torch_backport.patchset.series as model
from torch_backport.patchset.apply import apply_series
from checkout_repo import make_checkout, site_of
from fake_install import (AUTOCAST, copy_project, FakeInstall, INSTALLED, InstallTestCase,
                          ISA_PROBE, ScratchTestCase, source_python, STATE_DIRNAME, STOCK, TOUCHED,
                          UPSTREAM)

ISA = model.select_topics(["cpu-isa-probe"])[0]


def isa_patched() -> bytes:
    """What the cpu-isa-probe series makes of the stock 2.11.0 file."""
    pristine = (site_of(source_python(STOCK)) / ISA_PROBE).read_bytes()
    series = model.load_series("v2.11.0", ISA)
    return apply_series({ISA_PROBE: pristine}, series)[ISA_PROBE]


class TopicsWheelTest(InstallTestCase):
    scratch_prefix = "pregrad-topics-test-"
    maxDiff = None

    def test_default_apply_leaves_the_opt_in_topic_alone(self) -> None:
        install = self.install()
        before = install.snapshot()
        code, output = install.run()
        self.assertEqual(code, 0, output)
        after = install.snapshot()
        changed = sorted(rel for rel in after if after[rel] != before.get(rel))
        # Both default topics: pre-grad-pass-timing and autocast-cache-key.
        self.assertEqual([rel for rel in changed if not rel.startswith(STATE_DIRNAME)],
                         sorted(TOUCHED + [AUTOCAST]))
        self.assertEqual(after[ISA_PROBE], before[ISA_PROBE])
        self.assertEqual(sorted({rel.split("/")[0] for rel in changed
                                 if rel.startswith(".")}),
                         [STATE_DIRNAME, f"{STATE_DIRNAME}-autocast-cache-key"])
        self.assertNotIn("cpu-isa-probe", output)

    def test_opt_in_topic_applies_reports_and_reverts_on_its_own(self) -> None:
        install = self.install()
        before = install.snapshot()
        code, output = install.run("--topic", "cpu-isa-probe")
        self.assertEqual(code, 0, output)
        self.assertExpectedInline(output, """\
torch 2.11.0 in <site> (base v2.11.0, topic cpu-isa-probe, 3 patches)
  patched torch/_inductor/cpu_vec_isa.py
applied 3 patches to 1 files; originals kept in <site>/.torch-pregrad-backport-cpu-isa-probe
""")
        self.assertEqual(install.path(ISA_PROBE).read_bytes(), isa_patched())
        self.assertEqual({rel: install.path(rel).read_bytes() for rel in TOUCHED},
                         {rel: before[rel] for rel in TOUCHED})
        code, output = install.run("--status")
        self.assertEqual(code, 0, output)
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
  patched   torch/_inductor/cpu_vec_isa.py
patched: the series is applied (revert with --revert --topic cpu-isa-probe)
""")
        code, output = install.run("--revert", "--topic", "cpu-isa-probe")
        self.assertEqual(code, 0, output)
        self.assertEqual(install.snapshot(), before)

    def test_plain_revert_names_the_topic_still_applied(self) -> None:
        install = self.install()
        before = install.snapshot()
        code, output = install.run("--topic", "all")
        self.assertEqual(code, 0, output)
        code, output = install.run("--revert")
        self.assertEqual(code, 0, output)
        self.assertIn("note: topic cpu-isa-probe is still applied; revert it with "
                      "--revert --topic cpu-isa-probe", output)
        self.assertEqual(install.path(ISA_PROBE).read_bytes(), isa_patched())
        code, output = install.run("--revert", "--topic", "all")
        self.assertEqual(code, 0, output)
        self.assertEqual(install.snapshot(), before)

    def test_all_topics_are_refused_together_when_one_cannot_apply(self) -> None:
        install = self.install()
        install.path(ISA_PROBE).write_bytes(install.path(ISA_PROBE).read_bytes() + b"# local\n")
        before = install.snapshot()
        code, output = install.run("--topic", "all")
        self.assertEqual(code, 1, output)
        self.assertIn("<site>/torch/_inductor/cpu_vec_isa.py: differs from the wheel and "
                      "the series", output)
        # Refused before anything was written, not written and taken back.
        self.assertNotIn("took back", output)
        self.assertEqual(install.snapshot(), before)

    def test_topics_that_patch_the_same_file_are_refused_together(self) -> None:
        # A copy of the project whose patches/ gains a topic that patches
        # config.py, as the default topic does.
        copy = copy_project(self.tmp / "copy")
        clash = copy / "patches" / "v2.11.0" / "clash"
        clash.mkdir()
        patch = next((copy / "patches" / "v2.11.0").glob("0003-*.patch"))
        shutil.copy(patch, clash)
        (clash / "series").write_text(patch.name + "\n")
        shutil.copy(copy / "patches" / "v2.11.0" / "pristine.tsv", clash)
        with open(copy / "patches" / "topics.tsv", "a") as topics:
            topics.write("clash\tclash\topt-in\ttorch/_inductor/config.py\tnever\t"
                         "clash is present\ta topic that shares config.py\n")
        install = self.install()
        before = install.snapshot()
        code, output = install.run("--topic", "all", apply=copy / "scripts" / "apply.sh")
        self.assertEqual(code, 1, output)
        self.assertExpectedInline(output, """\
scripts/apply.sh: topics that patch the same file:
  v2.11.0: topics pre-grad-pass-timing and clash both patch torch/_functorch/aot_autograd.py
  v2.11.0: topics pre-grad-pass-timing and clash both patch torch/_inductor/codecache.py
  v2.11.0: topics pre-grad-pass-timing and clash both patch torch/_inductor/config.py
they cannot be applied together; nothing was changed
""")
        self.assertEqual(install.snapshot(), before)

    def test_unknown_topic_is_a_usage_error_naming_the_topics(self) -> None:
        install = self.install()
        before = install.snapshot()
        code, output = install.run("--topic", "cpu-isa")
        self.assertEqual(code, 2)
        self.assertExpectedInline(output, """\
scripts/apply.sh: --topic 'cpu-isa': unknown topic 'cpu-isa'; nothing was done; topics: pre-grad-pass-timing, autocast-cache-key, cpu-isa-probe, default, all
(see scripts/apply.sh --help)
""")  # noqa: E501 (the real output)
        self.assertEqual(install.snapshot(), before)

    def test_unknown_topic_beside_all_is_a_usage_error_wherever_it_appears(self) -> None:
        install = self.install()
        before = install.snapshot()
        for args in (("--topic", "all,bogus"), ("--topic", "bogus", "--topic", "all"),
                     ("--revert", "--topic", "all,bogus"),
                     ("--status", "--topic", "default,bogus")):
            with self.subTest(args=args):
                code, output = install.run(*args)
                self.assertEqual(code, 2, output)
                self.assertIn("unknown topic 'bogus'; nothing was done", output)
                self.assertEqual(install.snapshot(), before)

    def test_default_plus_an_opt_in_topic_applies_all_three(self) -> None:
        install = self.install()
        before = install.snapshot()
        code, output = install.run("--topic", "default,cpu-isa-probe")
        self.assertEqual(code, 0, output)
        after = install.snapshot()
        self.assertEqual(sorted(rel for rel in INSTALLED if after[rel] != before[rel]),
                         INSTALLED)
        code, output = install.run("--status")
        self.assertEqual(code, 0, output)

    def test_status_fails_when_a_default_topic_is_left_out_of_an_applied_install(self) -> None:
        """The README's old Dockerfile line: naming topics replaced the defaults."""
        install = self.install()
        code, output = install.run("--topic", "pre-grad-pass-timing", "--topic", "cpu-isa-probe")
        self.assertEqual(code, 0, output)
        code, output = install.run("--status")
        self.assertEqual(code, 1, output)
        self.assertIn("partly applied: default topic autocast-cache-key is pristine", output)
        self.assertEqual(install.run()[0], 0)  # a plain apply adds it
        self.assertEqual(install.run("--status")[0], 0)

    def vendor_probe_build(self) -> FakeInstall:
        """A vendor's 2.12 build: its cpu_vec_isa.py is no release's, so the
        opt-in topic has no series for it; the default topic's files are
        2.12.0's."""
        return self.install(UPSTREAM, version="2.12.0+vendor",
                            vendor_edits={ISA_PROBE: b"# vendor build\n"})

    def test_topic_without_a_series_for_the_release_is_refused(self) -> None:
        install = self.vendor_probe_build()
        before = install.snapshot()
        code, output = install.run("--topic", "all")
        self.assertEqual(code, 1, output)
        self.assertIn(
            "scripts/apply.sh: torch 2.12.0+vendor is not a supported base of topic "
            "cpu-isa-probe: its files match no base's (torch/_inductor/cpu_vec_isa.py differs "
            "from every base's (nearest by version: v2.12.0)) "
            "(supported: v2.9.1, v2.10.0, v2.11.0, v2.12.0, v2.13.0); nothing was changed",
            output)
        self.assertEqual(install.snapshot(), before)

    def test_status_calls_an_opt_in_topic_without_a_series_not_available(self) -> None:
        install = self.vendor_probe_build()
        code, output = install.run("--status")
        self.assertEqual(code, 0, output)
        self.assertExpectedInline(output, """\
torch 2.12.0+vendor in <site> (base v2.12.0, 2 patches)
  pristine  torch/_functorch/aot_autograd.py
  pristine  torch/_inductor/fx_passes/pre_grad.py
pristine: every file the series touches matches torch's RECORD

torch 2.12.0+vendor in <site> (base v2.12.0, topic autocast-cache-key, 3 patches)
  pristine  torch/_functorch/_aot_autograd/autograd_cache.py
pristine: every file the series touches matches torch's RECORD

torch 2.12.0+vendor in <site> (topic cpu-isa-probe)
not available for this release: topic cpu-isa-probe has no series that matches these files (torch/_inductor/cpu_vec_isa.py differs from every base's (nearest by version: v2.12.0)); supported bases: v2.9.1, v2.10.0, v2.11.0, v2.12.0, v2.13.0
""")  # noqa: E501 (the real output)
        code, output = install.run("--status", "--topic", "cpu-isa-probe")
        self.assertEqual(code, 1, output)
        self.assertIn("unsupported: topic cpu-isa-probe has no series that matches", output)

    def test_patch_release_gets_the_series_of_the_release_it_matches(self) -> None:
        # 2.12.1's touched files are byte-identical to 2.12.0's (both topics).
        install = self.install(UPSTREAM, version="2.12.1")
        before = install.snapshot()
        code, output = install.run("--topic", "all")
        self.assertEqual(code, 0, output)
        self.assertExpectedInline(output, """\
torch 2.12.1 in <site> (base v2.12.0, 2 patches)
torch 2.12.1: the 2 files the series touches are byte-identical to v2.12.0's: applying patches/v2.12.0
  patched torch/_functorch/aot_autograd.py
  patched torch/_inductor/fx_passes/pre_grad.py
applied 2 patches to 2 files; originals kept in <site>/.torch-pregrad-backport
torch 2.12.1 in <site> (base v2.12.0, topic autocast-cache-key, 3 patches)
torch 2.12.1: the one file the series touches is byte-identical to v2.12.0's: applying patches/v2.12.0/autocast-cache-key
  patched torch/_functorch/_aot_autograd/autograd_cache.py
applied 3 patches to 1 files; originals kept in <site>/.torch-pregrad-backport-autocast-cache-key
torch 2.12.1 in <site> (base v2.12.0, topic cpu-isa-probe, 3 patches)
torch 2.12.1: the one file the series touches is byte-identical to v2.12.0's: applying patches/v2.12.0/cpu-isa-probe
  patched torch/_inductor/cpu_vec_isa.py
applied 3 patches to 1 files; originals kept in <site>/.torch-pregrad-backport-cpu-isa-probe
""")  # noqa: E501 (the real output)
        code, output = install.run("--status")
        self.assertEqual(code, 0, output)
        self.assertIn("patched: the series is applied (revert with --revert --topic "
                      "cpu-isa-probe)", output)
        code, output = install.run("--revert", "--topic", "all")
        self.assertEqual(code, 0, output)
        self.assertEqual(install.snapshot(), before)

    def test_overlay_of_every_topic(self) -> None:
        install = self.install()
        out = self.tmp / "overlay"
        code, output = install.run("--overlay", "v2.11.0", "--topic", "all", "--out", str(out))
        self.assertEqual(code, 0, output)
        sums = (out / "SHA256SUMS").read_text().splitlines()
        self.assertEqual([line.split("  ")[1] for line in sums],
                         sorted(TOUCHED + [ISA_PROBE, AUTOCAST]))
        self.assertIn("topics: pre-grad-pass-timing autocast-cache-key cpu-isa-probe",
                      (out / "STAMP").read_text())
        self.assertEqual((out / ISA_PROBE).read_bytes(), isa_patched())


class TopicsCheckoutTest(ScratchTestCase):
    scratch_prefix = "pregrad-topics-checkout-"
    maxDiff = None

    def setUp(self) -> None:
        super().setUp()
        self.site = site_of(source_python(STOCK))

    def test_each_topic_commits_and_reverts_its_own_patches(self) -> None:
        checkout = make_checkout(self.tmp / "pytorch", self.site)
        code, output = checkout.run("--topic", "all")
        self.assertEqual(code, 0, output)
        log = checkout.git("log", "--format=%s", "-n", "11").splitlines()
        self.assertEqual(log[:3], [
            "inductor: remember a successful ISA probe next to its test library",
            "inductor: retry the ISA probe's dlopen after importing torch",
            "inductor: probe the CPU vector ISA without importing torch in the child on Linux",
        ])
        self.assertEqual(checkout.read(ISA_PROBE), isa_patched())
        # The probe patches have the same patch-ids on every base: the files
        # below them (v2.11.0's) decide.
        code, output = checkout.run("--status")
        self.assertEqual(code, 0, output)
        self.assertEqual(re.findall(r"^<checkout>:.* base (v[\d.]+) ", output, re.MULTILINE),
                         ["v2.11.0", "v2.11.0", "v2.11.0"])
        default_tree = checkout.git("rev-parse", "HEAD~3^{tree}")
        code, output = checkout.run("--revert", "--topic", "cpu-isa-probe")
        self.assertEqual(code, 0, output)
        self.assertIn("reverted 3 commit(s) of the series", output)
        self.assertEqual(checkout.git("rev-parse", "HEAD^{tree}"), default_tree)
        code, output = checkout.run("--status")
        self.assertIn("series: 8 of 8 patches applied (matched by patch-id)", output)
        self.assertIn("series: 0 of 3 patches applied (matched by patch-id)", output)


if __name__ == "__main__":
    unittest.main()
