"""--status beside a running apply or revert: it waits for the writer (a
shared lock on site-packages, with the same "waiting for" line) and never
reports a run in progress as interrupted."""

from __future__ import annotations

import threading
import unittest

from fake_install import InstallTestCase

STATUS_RUNS = 100


class StatusBesideWritersTest(InstallTestCase):
    def test_status_beside_apply_and_revert_cycles_is_never_interrupted(self) -> None:
        install = self.install()
        stop = threading.Event()
        cycles = []

        def apply_and_revert() -> None:
            while not stop.is_set():
                cycles.append((install.run()[0], install.run("--revert")[0]))

        writer = threading.Thread(target=apply_and_revert)
        writer.start()
        try:
            seen = [install.run("--status") for _ in range(STATUS_RUNS)]
        finally:
            stop.set()
            writer.join()
        self.assertGreater(len(cycles), 5)
        self.assertTrue(all(codes == (0, 0) for codes in cycles), cycles)
        interrupted = [output for _, output in seen if "interrupted" in output]
        self.assertEqual(interrupted, [])
        self.assertEqual([output for code, output in seen if code != 0], [])
        # It ran beside both: some runs saw the series applied, some not.
        self.assertEqual({"patched:" in output for _, output in seen}, {True, False})


if __name__ == "__main__":
    unittest.main()
