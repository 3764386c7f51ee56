"""Apply and --revert name the other processes that have this torch
loaded (Linux: /proc/*/maps): they keep the code they imported, and must be
restarted. The process here maps the install's torch/lib/libtorch_cpu.so as
the dynamic loader would."""

from __future__ import annotations

import subprocess
import sys
import unittest

from fake_install import InstallTestCase

HOLD = ("import mmap, sys, time; library = open(sys.argv[1], 'rb'); "
        "mapped = mmap.mmap(library.fileno(), 0, access=mmap.ACCESS_READ); "
        "print('loaded', flush=True); time.sleep(120)")


class RunningProcessesTest(InstallTestCase):
    def test_apply_and_revert_name_a_process_that_has_this_torch_loaded(self) -> None:
        install = self.install()
        library = install.site / "torch" / "lib" / "libtorch_cpu.so"
        library.parent.mkdir(parents=True)
        library.write_bytes(b"\0" * 8192)
        kernel = self.tmp / "notebook_kernel.py"
        kernel.write_text(HOLD)
        holder = subprocess.Popen([sys.executable, str(kernel), str(library)],
                                  stdout=subprocess.PIPE, text=True)
        self.addCleanup(holder.wait)
        self.addCleanup(holder.kill)
        self.assertEqual(holder.stdout.readline().strip(), "loaded")
        for args in ((), ("--revert",)):
            code, output = install.run(*args)
            self.assertEqual(code, 0, output)
            self.assertIn("note: 1 running process(es) have this torch loaded; they keep the "
                          "code they imported.", output)
            self.assertIn(f"  pid {holder.pid}: {sys.executable} {kernel} ", output)

    def test_no_note_when_nothing_has_it_loaded(self) -> None:
        install = self.install()
        code, output = install.run()
        self.assertEqual(code, 0, output)
        self.assertNotIn("running process", output)


if __name__ == "__main__":
    unittest.main()
