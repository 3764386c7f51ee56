"""Child process of the autocast test about processes sharing a cache.

Usage: autocast_child.py DTYPE   (bfloat16 or float16)

Compiles both forms under that autocast dtype, on the cache directory the
environment names (TORCHINDUCTOR_CACHE_DIR): `matmul_in_region` after
`torch.set_autocast_dtype("cpu", DTYPE)`, and `matmul_relu` called inside
`torch.autocast("cpu", dtype=DTYPE)`. Prints, as its last line, a JSON list
with each compile's output dtype, whether it equals eager, and the
AOTAutogradCache hits, misses and bypasses.
"""

from __future__ import annotations

import json
import sys

import torch
from torch._dynamo.utils import counters
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config

from autocast_models import aot_counts, matmul_in_region, matmul_relu, operands


def run_under(dtype_name: str) -> list[dict[str, object]]:
    """Both forms compiled under `dtype_name`, in this process (the test
    about processes runs the first process's compiles in its own process
    with this, the second's in a child); the ambient dtype is restored."""
    dtype = getattr(torch, dtype_name)
    a, b = operands()
    report = []
    ambient = torch.get_autocast_dtype("cpu")
    try:
        with functorch_config.patch(enable_autograd_cache=True), \
                inductor_config.patch(fx_graph_cache=True):
            torch.set_autocast_dtype("cpu", dtype)
            for form in ("region", "call_site"):
                torch._dynamo.reset()
                counters.clear()
                if form == "region":
                    compiled = torch.compile(matmul_in_region)(a, b)
                    eager = matmul_in_region(a, b)
                else:
                    with torch.autocast("cpu", dtype=dtype):
                        compiled, eager = torch.compile(matmul_relu)(a, b), matmul_relu(a, b)
                try:
                    torch.testing.assert_close(compiled, eager)
                    equal = True
                except AssertionError:
                    equal = False
                report.append({"form": form, "dtype": str(compiled.dtype).replace("torch.", ""),
                               "equals_eager": equal, **aot_counts()})
    finally:
        torch.set_autocast_dtype("cpu", ambient)
        torch._dynamo.reset()
    return report


def main(dtype_name: str) -> None:
    print(json.dumps(run_under(dtype_name)))


if __name__ == "__main__":
    main(sys.argv[1])
