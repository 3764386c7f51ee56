"""AOTInductor on a real network equals eager: torchvision's resnet18
(trained-like BatchNorms, real_models.py), exported with torch.export, then
aoti_compile_and_package and aoti_load_package, under torch.no_grad with
freezing.

Export lifts the parameters as Dynamo does, so the late fold that
compile_fx on a symbolic_trace'd module gets wrong cannot happen here: right
on every release, stock and patched. It compiles a whole C++ wrapper (about
30 s on 2 cores), so the matrix runs it on one full-tier patched build only
(test/harness/matrix_jobs.AOTI_RELEASE); it is the entry point users of
`torch.export` ship, and docs/results-fixes.md says it is not affected.
"""

from __future__ import annotations

import tempfile
import unittest
from pathlib import Path

import torch
from torch._inductor import config as inductor_config
from torch._inductor.test_case import TestCase

from real_models import make_real_model, max_abs_error, TOLERANCE, torchvision_missing


@unittest.skipIf(torchvision_missing() is not None, str(torchvision_missing()))
class AotInductorRealModelTest(TestCase):
    def test_aot_inductor_resnet18_with_freezing_matches_eager(self) -> None:
        model, x = make_real_model("resnet18")
        with torch.no_grad():
            expected = model(x)
            with inductor_config.patch(freezing=True), tempfile.TemporaryDirectory() as work:
                program = torch.export.export(model, (x,))
                package = torch._inductor.aoti_compile_and_package(
                    program, package_path=str(Path(work) / "resnet18.pt2"))
                actual = torch._inductor.aoti_load_package(package)(x)
        actual = actual[0] if isinstance(actual, (list, tuple)) else actual
        torch.testing.assert_close(
            actual, expected, **TOLERANCE,
            msg=lambda m: f"max abs error {max_abs_error(actual, expected):.4g}\n{m}")


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
