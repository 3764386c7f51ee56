"""Real networks compiled for CPU inference with freezing equal eager.

torchvision's resnet50 and mobilenet_v3_small (Conv2d), and small Conv1d and
Conv3d nets (random weights, trained-like BatchNorms: real_models.py) under
torch.no_grad with freezing, through four paths: `compile_fx` on a
symbolic_trace'd module (the convs stay modules; the late pre-grad passes
fold each BatchNorm after the conv weights were captured, so stock 2.12.0
and later are off by far more than the output's size), the same through
`torch._inductor.compile` (its public wrapper: the same defect), the same
with `pre_grad_pass_timing = "early"` (the workaround on a stock release
that has the option), and `torch.compile` (Dynamo lifts the parameters:
right everywhere). stock_expectations.py says which cells fail
on which stock release; test/torchvision.tsv which torchvision each release
gets.
"""

from __future__ import annotations


import torch
from torch._inductor.test_case import TestCase
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)

from real_models import (
    compile_with_freezing,
    make_real_model,
    max_abs_error,
    SMALL_NETS,
    TOLERANCE,
    torchvision_missing,
)

# Conv2d nets from torchvision, and small Conv1d and Conv3d ones (real_models.SMALL_NETS).
CELL_MODELS = ["resnet50", "mobilenet_v3_small", "conv1d_speech", "conv3d_video"]
# path -> (entry point, pre_grad_pass_timing or None to leave it unset)
PATHS = {
    "compile_fx": ("compile_fx", None),
    "inductor_compile": ("inductor_compile", None),
    "compile_fx_early": ("compile_fx", "early"),
    "torch_compile": ("torch_compile", None),
}


class RealModelResultsTests(TestCase):
    def setUp(self) -> None:
        super().setUp()
        torch._dynamo.reset()

    @parametrize("path", list(PATHS))
    @parametrize("model_name", CELL_MODELS)
    def test_real_model_with_freezing_matches_eager(self, model_name: str, path: str) -> None:
        """One compile (freezing is never cached) returns eager's numbers."""
        if model_name not in SMALL_NETS and torchvision_missing() is not None:
            self.skipTest(str(torchvision_missing()))  # the small nets need no torchvision
        entry, timing = PATHS[path]
        model, x = make_real_model(model_name)
        with torch.no_grad():
            expected = model(x)
        config = {} if timing is None else {"pre_grad_pass_timing": timing}
        actual = compile_with_freezing(entry, model, x, **config)
        torch.testing.assert_close(
            actual, expected, **TOLERANCE,
            msg=lambda m: (f"{model_name} via {path}: max abs error "
                           f"{max_abs_error(actual, expected):.4g} on outputs up to "
                           f"{float(expected.abs().max()):.3g}\n{m}"),
        )


instantiate_parametrized_tests(RealModelResultsTests)
