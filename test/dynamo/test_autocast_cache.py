"""Autocast and the AOTAutogradCache, through the real torch.compile on the CPU.

A graph traced under one autocast dtype has its casts baked in, so it must
not be served to a compile under another (topic autocast-cache-key):
- an autocast region inside the function that names no dtype takes the
  ambient `torch.get_autocast_dtype("cpu")` at trace time (this project's
  fix, cf. pytorch#191110: open upstream, so stale on every release that
  caches such graphs);
- a region at the call site is the ambient autocast state itself
  (pytorch#181564, 2.13; backported);
and a graph with an autocast region must be cached at all (pytorch#192555,
2.14; 2.12 and 2.13 bypass it on every compile).

Each test starts with empty compile caches (conftest.py) and
`torch._dynamo.reset()` between compiles; results are compared with eager
under the same settings, dtype included. stock_expectations.py says which
tests fail on which stock release.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from torch._dynamo.utils import counters
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config
from torch._inductor.test_case import TestCase

from autocast_child import run_under
from autocast_models import aot_counts, matmul_in_region, matmul_relu, operands, RotaryStyle
from pregrad_passes import child_environment

HERE = Path(__file__).resolve().parent


@functorch_config.patch(enable_autograd_cache=True)
@inductor_config.patch(fx_graph_cache=True)
class AutocastCacheTests(TestCase):
    def setUp(self) -> None:
        super().setUp()
        torch._dynamo.reset()
        counters.clear()
        self.addCleanup(torch.set_autocast_dtype, "cpu", torch.get_autocast_dtype("cpu"))
        self.a, self.b = operands()

    def compile_region(self, ambient: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(compiled, eager) of the function's own dtype-less region under `ambient`."""
        torch.set_autocast_dtype("cpu", ambient)
        torch._dynamo.reset()
        return (torch.compile(matmul_in_region)(self.a, self.b),
                matmul_in_region(self.a, self.b))

    def compile_at_call_site(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(compiled, eager) of an autocast-free function called inside a region."""
        torch._dynamo.reset()
        with torch.autocast("cpu", dtype=dtype):
            return (torch.compile(matmul_relu)(self.a, self.b),
                    matmul_relu(self.a, self.b))

    def test_region_without_dtype_follows_the_ambient_dtype_on_a_warm_cache(self) -> None:
        self.compile_region(torch.bfloat16)
        compiled, eager = self.compile_region(torch.float16)
        self.assertEqual(compiled.dtype, torch.float16)
        self.assertEqual(compiled, eager)

    def test_region_without_dtype_misses_under_another_ambient_dtype(self) -> None:
        self.compile_region(torch.bfloat16)
        self.compile_region(torch.float16)
        self.assertEqual(aot_counts(), {"hit": 0, "miss": 2, "bypass": 0})

    def test_region_without_dtype_hits_under_the_same_ambient_dtype(self) -> None:
        self.compile_region(torch.bfloat16)
        compiled, eager = self.compile_region(torch.bfloat16)
        self.assertEqual(aot_counts(), {"hit": 1, "miss": 1, "bypass": 0})
        self.assertEqual(compiled, eager)

    def test_call_site_region_follows_its_dtype_on_a_warm_cache(self) -> None:
        self.compile_at_call_site(torch.bfloat16)
        compiled, eager = self.compile_at_call_site(torch.float16)
        self.assertEqual(compiled.dtype, torch.float16)
        self.assertEqual(compiled, eager)

    def test_call_site_region_misses_under_another_dtype(self) -> None:
        self.compile_at_call_site(torch.bfloat16)
        self.compile_at_call_site(torch.float16)
        self.assertEqual(aot_counts(), {"hit": 0, "miss": 2, "bypass": 0})

    def test_autocast_free_graph_keeps_its_hit_under_another_ambient_dtype(self) -> None:
        """The ambient dtype of a device whose autocast is off is keyed only
        for graphs with a region that takes it."""
        torch.set_autocast_dtype("cpu", torch.bfloat16)
        torch.compile(matmul_relu)(self.a, self.b)
        torch._dynamo.reset()
        torch.set_autocast_dtype("cpu", torch.float16)
        compiled = torch.compile(matmul_relu)(self.a, self.b)
        self.assertEqual(aot_counts(), {"hit": 1, "miss": 1, "bypass": 0})
        self.assertEqual(compiled, matmul_relu(self.a, self.b))

    @torch.no_grad()  # an inference graph is saved at once; a training one after backward
    def test_module_with_an_autocast_disabled_region_hits_on_a_warm_compile(self) -> None:
        torch.manual_seed(0)
        model, x = RotaryStyle(), torch.randn(4, 16)
        torch.compile(model)(x)
        torch._dynamo.reset()
        warm = torch.compile(model)(x)
        self.assertEqual(aot_counts(), {"hit": 1, "miss": 1, "bypass": 0})
        self.assertEqual(warm, model(x))

    def test_processes_sharing_a_cache_get_their_own_autocast_dtype(self) -> None:
        """A second process under float16 on the cache a bfloat16 process
        filled misses, in both forms, and returns float16. The first process
        is this one (its cache directory is the child's)."""
        env = child_environment(HERE)  # carries the cache dir, emptied for this test

        def run_child(dtype: str) -> list[dict[str, object]]:
            result = subprocess.run([sys.executable, str(HERE / "autocast_child.py"), dtype],
                                    env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(result.returncode, 0, result.stderr[-4000:])
            return json.loads(result.stdout.splitlines()[-1])

        cold = {"equals_eager": True, "hit": 0, "miss": 1, "bypass": 0}
        self.assertEqual(run_under("bfloat16"), [
            {"form": "region", "dtype": "bfloat16", **cold},
            {"form": "call_site", "dtype": "bfloat16", **cold},
        ])
        self.assertEqual(run_child("float16"), [
            {"form": "region", "dtype": "float16", **cold},
            {"form": "call_site", "dtype": "float16", **cold},
        ])


if __name__ == "__main__":
    from torch._inductor.test_case import run_tests

    run_tests()
