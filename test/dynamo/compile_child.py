"""Child process of test_warm_start_in_a_second_process.

Usage: compile_child.py UUID [UUID ...]

For each uuid in turn: compiles `fn` with a counting pre-grad pass that
reports that uuid, and records how often Inductor ran its pre-grad passes and
the cache hits and misses of that compile. Prints a JSON list, one entry per
uuid, as its last line. The cache directory comes from TORCHINDUCTOR_CACHE_DIR.
"""

from __future__ import annotations

import json
import sys

import torch
from torch._dynamo.utils import counters
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config

from pregrad_passes import cache_counts, count_run_pre_grad_passes, CountingPass


def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * 2 + y


def main(uuids: list[str]) -> None:
    x, y = torch.ones(10), torch.ones(10)
    report = []
    for uuid in uuids:
        torch._dynamo.reset()
        counters.clear()
        with (
            functorch_config.patch(enable_autograd_cache=True),
            inductor_config.patch(
                {"fx_graph_cache": True, "pre_grad_custom_pass": CountingPass(uuid)}
            ),
            count_run_pre_grad_passes() as calls,
        ):
            result = torch.compile(fn)(x, y)
        assert torch.equal(result, fn(x, y)), result
        report.append({"pre_grad_calls": calls[0], **cache_counts()})
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
