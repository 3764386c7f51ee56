"""Autocast on CUDA and the AOTAutogradCache, through the real torch.compile.

The CPU suites (test_autocast_cache.py, test_pre_grad_pass_timing.py) check
the cache keys and the pre-grad pass timing on the CPU; on a GPU Inductor
runs other pre-grad passes and CUDA's autocast casts other ops. Here, on a
CUDA device (scripts/gpu-check.sh runs it, stock and patched):
- a small model compiled under `torch.autocast("cuda", dtype=torch.float16)`,
  then in the same cache directory under bfloat16, returns eager's bfloat16
  result: the graph traced under float16 is not served again (a region at
  the call site is the ambient autocast state itself, keyed by pytorch#181564
  from 2.13, backported by the topic autocast-cache-key);
- a warm compile under autocast, with a custom pre-grad pass that has a uuid
  (so the timing resolves late), hits the AOTAutogradCache and runs no
  pre-grad pass (the feature: upstream 2.12).

Without a CUDA device every test skips, with the reason. Each test starts
with empty compile caches (conftest.py); `torch._dynamo.reset()` between
compiles. stock_expectations.py says which tests fail on which stock release.
"""

from __future__ import annotations

import unittest

import torch
from torch._dynamo.utils import counters
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config
from torch._inductor.test_case import TestCase

from autocast_models import aot_counts
from pregrad_passes import count_run_pre_grad_passes, CountingPass

# Compiled and eager run the same cuBLAS matmuls in the autocast dtype; the
# fused pointwise ops may round once where eager rounds twice: a unit in the
# last place of outputs of magnitude about 1 (bfloat16: 2**-8). A stale hit
# shows in the dtype, which assertEqual checks too.
TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}
CUDA_MISSING = (None if torch.cuda.is_available() else
                f"needs a CUDA device: torch {torch.__version__} sees none "
                "(scripts/gpu-check.sh runs this file where there is one)")


class SmallModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 64)
        self.fc2 = torch.nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x).relu()) * 2


@unittest.skipIf(CUDA_MISSING is not None, str(CUDA_MISSING))
@functorch_config.patch(enable_autograd_cache=True)
@inductor_config.patch(fx_graph_cache=True)
class CudaAutocastCacheTests(TestCase):
    def setUp(self) -> None:
        super().setUp()
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        self.model = SmallModel().to("cuda")
        self.x = torch.randn(16, 64, device="cuda")

    @torch.no_grad()  # an inference graph is saved at once; a training one after backward
    def compile_under(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(compiled, eager) of the model called inside a CUDA autocast region."""
        torch._dynamo.reset()
        with torch.autocast("cuda", dtype=dtype):
            return torch.compile(self.model)(self.x), self.model(self.x)

    def test_bfloat16_compile_after_float16_gets_bfloat16(self) -> None:
        compiled, eager = self.compile_under(torch.float16)
        self.assertEqual(compiled.dtype, torch.float16)
        self.assertEqual(compiled, eager, **TOLERANCE)
        compiled, eager = self.compile_under(torch.bfloat16)
        self.assertEqual(eager.dtype, torch.bfloat16)
        self.assertEqual(compiled.dtype, torch.bfloat16)  # float16: a stale hit
        self.assertEqual(compiled, eager, **TOLERANCE)

    def test_warm_compile_hits_and_runs_no_pre_grad_pass(self) -> None:
        custom_pass = CountingPass("cuda-counting-pass-v1")
        with inductor_config.patch(pre_grad_custom_pass=custom_pass), \
                count_run_pre_grad_passes() as calls:
            cold, _ = self.compile_under(torch.float16)
            self.assertEqual((calls[0], custom_pass.calls), (1, 1))
            self.assertEqual(aot_counts(), {"hit": 0, "miss": 1, "bypass": 0})

            warm, eager = self.compile_under(torch.float16)
            self.assertEqual((calls[0], custom_pass.calls), (1, 1))
            self.assertEqual(aot_counts(), {"hit": 1, "miss": 1, "bypass": 0})
        self.assertEqual(warm, cold, atol=0, rtol=0)  # the same compiled graph
        self.assertEqual(warm, eager, **TOLERANCE)


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
