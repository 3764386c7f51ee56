"""No write follows a link another user planted (fsio.py, transaction.py,
index.py). Installs and an index directory belong to `nobody`; `nobody`
plants symbolic links (with setpriv) at every name the project writes
beside a target: the temporary names earlier releases used, the state
directory and its staging and trash names, the index's pages. Root then
applies, reverts and writes the index: the linked file and directory are
untouched, and each run either succeeds or refuses naming the link."""

from __future__ import annotations

import os
import shutil
import tempfile
import unittest
from pathlib import Path
from typing import Dict

from fake_install import (FakeInstall, make_fake_install, source_python, STATE_DIRNAME, STOCK,
                          TOUCHED)
from fake_wheel import make_fake_wheel, release_files
from other_user import as_nobody, give_to_nobody, needs_root_and_setpriv

ROOT_ONLY = b"root's own bytes\n"


def plant(link: Path, to: Path) -> None:
    as_nobody("ln", "-s", str(to), str(link))


@needs_root_and_setpriv
class PlantedLinksTest(unittest.TestCase):
    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="pregrad-planted-", dir="/tmp"))
        self.addCleanup(shutil.rmtree, self.root, True)
        os.chmod(self.root, 0o755)
        # What root owns and nobody must not reach through a link.
        self.secret_dir = self.root / "root-only"
        self.secret_dir.mkdir(mode=0o700)
        self.secret = self.secret_dir / "file"
        self.secret.write_bytes(ROOT_ONLY)
        self.secret.chmod(0o600)

    def secrets(self) -> Dict[str, bytes]:
        return {str(path.relative_to(self.secret_dir)): path.read_bytes()
                for path in sorted(self.secret_dir.rglob("*")) if path.is_file()}

    def nobodys_install(self) -> FakeInstall:
        install = make_fake_install(self.root / "install", source_python(STOCK),
                                    base_python="/usr/bin/python3")
        give_to_nobody(self.root / "install")
        return install

    def test_links_at_the_old_temporary_names_are_not_written_through(self) -> None:
        install = self.nobodys_install()
        for rel in TOUCHED:
            target = install.path(rel)
            plant(target.with_name(f".{target.name}.pregrad-tmp"), self.secret)
        applied, said = install.run()
        self.assertEqual(applied, 0, said)
        reverted, said_too = install.run("--revert")
        self.assertEqual(reverted, 0, said_too)
        self.assertEqual(self.secrets(), {"file": ROOT_ONLY})
        self.assertEqual(self.secret.stat().st_uid, 0)

    def test_a_planted_state_directory_is_refused_by_name(self) -> None:
        install = self.nobodys_install()
        for name in (STATE_DIRNAME, f"{STATE_DIRNAME}.staging", f"{STATE_DIRNAME}.trash"):
            with self.subTest(name=name):
                link = install.site / name
                plant(link, self.secret_dir)
                before = install.snapshot()
                code, said = install.run()
                self.assertEqual(code, 1, said)
                self.assertIn(f"<site>/{name} is a symbolic link where this project expects "
                              "a directory", said)
                self.assertNotIn("Traceback", said)
                self.assertEqual(install.snapshot(), before)
                self.assertEqual(self.secrets(), {"file": ROOT_ONLY})
                link.unlink()

    def test_a_planted_link_in_place_of_a_file_to_patch_is_refused(self) -> None:
        install = self.nobodys_install()
        target = install.path(TOUCHED[0])
        target.unlink()
        plant(target, self.secret)
        code, said = install.run()
        self.assertEqual(code, 1, said)
        self.assertNotIn("Traceback", said)
        self.assertEqual(self.secrets(), {"file": ROOT_ONLY})

    def test_the_index_is_written_past_links_at_the_old_temporary_names(self) -> None:
        from torch_backport.generated.index import read_all, write_index
        out = self.root / "dist"
        make_fake_wheel(out, release_files(source_python(STOCK)), "2.11.0")
        (out / "simple" / "torch").mkdir(parents=True)
        give_to_nobody(out)
        wheel = next(out.glob("torch-*.whl"))
        for name in (f".{wheel.name}.metadata.pregrad-tmp", "simple/.index.html.pregrad-tmp",
                     "simple/torch/.index.html.pregrad-tmp"):
            plant(out / name, self.secret)
        write_index(out, read_all(out))
        self.assertEqual(self.secrets(), {"file": ROOT_ONLY})
        self.assertTrue((out / f"{wheel.name}.metadata").is_file())
        self.assertFalse((out / f"{wheel.name}.metadata").is_symlink())
        self.assertIn(wheel.name, (out / "simple" / "torch" / "index.html").read_text())

    def test_a_planted_index_page_directory_is_refused_by_name(self) -> None:
        from torch_backport.infra.fsio import LinkRefused
        from torch_backport.generated.index import read_all, write_index
        out = self.root / "dist"
        make_fake_wheel(out, release_files(source_python(STOCK)), "2.11.0")
        give_to_nobody(out)
        plant(out / "simple", self.secret_dir)
        with self.assertRaisesRegex(LinkRefused, f"{out}/simple is a symbolic link"):
            write_index(out, read_all(out))
        self.assertEqual(self.secrets(), {"file": ROOT_ONLY})


class PreThreeElevenRemovalTest(unittest.TestCase):
    """dirfd.walk_and_remove, what --revert and the overlay remove a tree
    with where the target interpreter predates shutil.rmtree(dir_fd=)
    (Python 3.9, 3.10; the matrix's 3.10 row runs it for real)."""

    def test_the_tree_goes_and_a_linked_directory_keeps_what_it_holds(self) -> None:
        from torch_backport.infra.dirfd import walk_and_remove
        root = Path(tempfile.mkdtemp(prefix="pregrad-walk-"))
        self.addCleanup(shutil.rmtree, root, True)
        outside = root / "outside"
        outside.mkdir()
        (outside / "kept").write_bytes(ROOT_ONLY)
        tree = root / "tree"
        (tree / "a" / "b").mkdir(parents=True)
        (tree / "a" / "b" / "file").write_bytes(b"x")
        (tree / "file").write_bytes(b"y")
        (tree / "a" / "linked-dir").symlink_to(outside)
        (tree / "linked-file").symlink_to(outside / "kept")
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            walk_and_remove(fd, "tree")
        finally:
            os.close(fd)
        self.assertEqual(sorted(os.listdir(root)), ["outside"])
        self.assertEqual((outside / "kept").read_bytes(), ROOT_ONLY)


if __name__ == "__main__":
    unittest.main()
