"""Child process of the tests that are about processes: a warm start in a
second process, and a second machine served by a shared remote cache.

Usage: compile_child.py SCENARIO [SCENARIO ...]

A scenario is UUID, or TIMING:UUID:FUNCTION (TIMING one of default, early,
late; FUNCTION a key of FUNCTIONS), run in turn: compile that function with a
counting pre-grad pass that reports that uuid, and record how often Inductor
ran its pre-grad passes and the cache hits and misses of that compile. Prints
a JSON list, one entry per scenario, as its last line. The cache directory and
any remote cache come from the environment (TORCHINDUCTOR_CACHE_DIR,
TORCHINDUCTOR_*_REMOTE_CACHE, TORCHINDUCTOR_REDIS_HOST/PORT).
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


def fn_sub(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * 3 - y


FUNCTIONS = {"fn": fn, "fn_sub": fn_sub}


def run_scenarios(scenarios: list[str]) -> list[dict[str, int]]:
    """Each scenario compiled in turn, in this process: its pre-grad pass
    calls and cache counts. The tests about processes run the first process's
    scenarios in their own process with this, and the second's in a child."""
    x, y = torch.ones(10), torch.ones(10)
    report = []
    for scenario in scenarios:
        timing, uuid, name = scenario.split(":") if ":" in scenario else ("default", scenario, "fn")
        function = FUNCTIONS[name]
        torch._dynamo.reset()
        counters.clear()
        patches = {"fx_graph_cache": True, "pre_grad_custom_pass": CountingPass(uuid)}
        if timing != "default":
            patches["pre_grad_pass_timing"] = timing
        with (
            functorch_config.patch(enable_autograd_cache=True),
            inductor_config.patch(patches),
            count_run_pre_grad_passes() as calls,
        ):
            result = torch.compile(function)(x, y)
        assert torch.equal(result, function(x, y)), result
        report.append({"pre_grad_calls": calls[0], **cache_counts()})
    torch._dynamo.reset()
    return report


def main(scenarios: list[str]) -> None:
    print(json.dumps(run_scenarios(scenarios)))


if __name__ == "__main__":
    main(sys.argv[1:])
