"""Installs uv made: advice names uv's commands (a uv venv often has no
pip), and a symlink-mode install (UV_LINK_MODE=symlink: files are links into
uv's cache) is refused as what it is, never patched through the links and
never called "modified"."""

from __future__ import annotations

import unittest

from fake_install import FakeInstall, InstallTestCase, TOUCHED


def made_by_uv(install: FakeInstall) -> None:
    (dist_info,) = install.site.glob("torch-*.dist-info")
    (dist_info / "INSTALLER").write_text("uv\n")


class UvInstallsTest(InstallTestCase):
    def test_advice_for_a_uv_install_names_uv(self) -> None:
        install = self.install()
        made_by_uv(install)
        install.path(TOUCHED[0]).write_bytes(install.path(TOUCHED[0]).read_bytes() + b"# x\n")
        code, output = install.run()
        self.assertEqual(code, 1, output)
        self.assertIn("reinstall torch (uv pip install -p <python> --reinstall-package torch "
                      "--no-deps torch==2.11.0)", output)
        self.assertNotIn("-m pip", output)

    def test_a_symlink_mode_install_is_refused_and_its_cache_untouched(self) -> None:
        install = self.install()
        made_by_uv(install)
        cache = self.tmp / "uv-cache"
        for rel in TOUCHED:
            (cache / rel).parent.mkdir(parents=True, exist_ok=True)
            install.path(rel).rename(cache / rel)
            install.path(rel).symlink_to(cache / rel)
        before = {rel: (cache / rel).read_bytes() for rel in TOUCHED}
        code, output = install.run("--status", "--topic", "pre-grad-pass-timing")
        self.assertEqual(code, 1, output)
        self.assertIn("linked: the files the series touches are symbolic links into uv's "
                      "cache", output)
        self.assertNotIn("modified", output)
        code, output = install.run()
        self.assertEqual(code, 1, output)
        self.assertIn("patching them would change every venv that shares it", output)
        self.assertIn("UV_LINK_MODE=copy uv pip install -p <python> --reinstall-package torch "
                      "--no-deps torch==2.11.0", output)
        self.assertEqual({rel: (cache / rel).read_bytes() for rel in TOUCHED}, before)
        self.assertTrue(all(install.path(rel).is_symlink() for rel in TOUCHED))


if __name__ == "__main__":
    unittest.main()
