"""Custom pre-grad passes and counters shared by the tests and their child process.

Each pass counts its own calls. `count_run_pre_grad_passes` wraps Inductor's
real `run_pre_grad_passes` (the built-in passes plus the custom one) the way
upstream's test_aot_autograd_cache.py does, so a call is counted whether or not
a custom pass is set.
"""

from __future__ import annotations

import contextlib
import copy
import os
import unittest.mock
from collections.abc import Iterator
from typing import Any

import torch
from torch._dynamo.utils import counters
from torch._inductor.custom_graph_pass import CustomGraphPass

from isa_probe import SKIP_ISA_PROBE  # every child of a test alike, so their cache keys agree


def child_environment(here: os.PathLike[str] | str, **extra: str) -> dict[str, str]:
    """os.environ (with the cache directory, emptied for the test) for a child that
    imports the test helpers in `here`, without the ISA probe."""
    env = {**os.environ, **SKIP_ISA_PROBE, **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(here), os.environ.get("PYTHONPATH", "")])
    return env


class CountingPass(CustomGraphPass):
    """Leaves the graph alone; `uuid` is what the pass reports (None: no uuid)."""

    def __init__(self, uuid: Any = "counting-pass-v1") -> None:
        self._uuid = uuid
        self.calls = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.calls += 1

    def uuid(self) -> Any:
        return self._uuid


class ScaleOutputPass(CustomGraphPass):
    """Multiplies every tensor output by `factor`: a stale cache hit shows as
    wrong numbers. Its uuid names the factor unless `with_uuid` is False."""

    def __init__(self, factor: float, with_uuid: bool = True) -> None:
        self.factor = factor
        self.with_uuid = with_uuid
        self.calls = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.calls += 1
        output = graph.output_node()
        (results,) = output.args
        scaled = []
        with graph.inserting_before(output):
            for value in results if isinstance(results, (list, tuple)) else [results]:
                if isinstance(value, torch.fx.Node):
                    value = graph.call_function(torch.mul, (value, self.factor))
                scaled.append(value)
        output.args = (type(results)(scaled) if isinstance(results, (list, tuple)) else scaled[0],)

    def uuid(self) -> Any:
        return f"scale-output-{self.factor}" if self.with_uuid else None


class SinToCosPass(CustomGraphPass):
    """Turns every torch.sin into torch.cos: its effect shows in the output."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.calls += 1
        for node in graph.nodes:
            if node.op == "call_function" and node.target is torch.sin:
                node.target = torch.cos

    def uuid(self) -> Any:
        return "sin-to-cos-v1"


def plain_callable_pass(graph: torch.fx.Graph) -> None:
    """A pre-grad pass that is a bare function: it cannot have a uuid."""
    plain_callable_pass.calls += 1  # type: ignore[attr-defined]


plain_callable_pass.calls = 0  # type: ignore[attr-defined]


@contextlib.contextmanager
def count_run_pre_grad_passes() -> Iterator[list[int]]:
    """Yields a one-element list holding how often Inductor ran its pre-grad passes."""
    from torch._inductor import compile_fx

    real = compile_fx.run_pre_grad_passes
    calls = [0]

    def counting(model: torch.fx.GraphModule, example_inputs: Any) -> Any:
        calls[0] += 1
        return real(model, example_inputs)

    with unittest.mock.patch.object(compile_fx, "run_pre_grad_passes", counting):
        yield calls


def cache_counts(*, bypasses: bool = False) -> dict[str, int]:
    """The AOTAutogradCache's and FX graph cache's hits and misses since
    `counters.clear()`, and their bypasses if asked."""
    aot, inductor = counters["aot_autograd"], counters["inductor"]
    counts = {
        "aot_hit": aot["autograd_cache_hit"],
        "aot_miss": aot["autograd_cache_miss"],
        "fx_hit": inductor["fxgraph_cache_hit"],
        "fx_miss": inductor["fxgraph_cache_miss"],
    }
    if bypasses:
        counts |= {"aot_bypass": aot["autograd_cache_bypass"],
                   "fx_bypass": inductor["fxgraph_cache_bypass"]}
    return counts


class DoubleLinearWeightsPass(CustomGraphPass):
    """Replaces the submodule `linear` of the graph's module with a copy whose
    weights are doubled: a pass that swaps parameters, as fuse_conv_bn does."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.calls += 1
        module = graph.owning_module
        doubled = copy.deepcopy(module.get_submodule("linear"))
        doubled.weight.data.mul_(2)
        module.linear = doubled

    def uuid(self) -> Any:
        return "double-linear-weights-v1"
