"""One compile, in a new process, reported as JSON on the last line of stdout.

Usage: PY bench/worker.py WORKLOAD SIZE MODE CUSTOM   (TORCHINDUCTOR_CACHE_DIR set by the caller)

WORKLOAD: chain (a long chain of small elementwise ops), transformer (a stack
of nn.TransformerEncoderLayer), convbn (conv + batch-norm + relu blocks, eval),
resnet50 (torchvision's, random weights and trained-like BatchNorms from
test/dynamo/real_models.py, eval, 64x64 images)
SIZE: chain links, encoder layers, conv blocks or (resnet50) images per batch
MODE: infer (under torch.no_grad) | train (forward + backward)
CUSTOM: none | uuid | nouuid | fakeprop (a pass that runs fake-tensor
propagation over the graph to learn shapes and dtypes, then rewrites it, as
quantization and fusion passes do; it has a uuid)

It measures wall time from torch.compile to the first compiled result, the
time inside Inductor's run_pre_grad_passes and inside the custom pass, their
call counts, the AOTAutograd / FX graph cache counters and whether the result
equals eager. The CPU vector-ISA probe (a one-off ~11 s per process on CUDA
wheels) is run before the clock starts, so cold and warm compare compiles.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import unittest.mock
from pathlib import Path
from typing import Any, Callable

import torch
from torch._dynamo.utils import counters
from torch._functorch import config as functorch_config
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass

PASS_SECONDS = [0.0]


class TimedPass(CustomGraphPass):
    """Base for the benchmark's custom passes: times itself into PASS_SECONDS."""

    def __init__(self, uuid: Any) -> None:
        self._uuid = uuid

    def __call__(self, graph: torch.fx.Graph) -> None:
        start = time.perf_counter()
        self.run(graph)
        PASS_SECONDS[0] += time.perf_counter() - start

    def run(self, graph: torch.fx.Graph) -> None:
        pass

    def uuid(self) -> Any:
        return self._uuid


class FakePropPass(TimedPass):
    """Propagates fake tensors through the graph (shapes, dtypes), then drops
    multiplications by 1 whose result has the input's shape and dtype."""

    def run(self, graph: torch.fx.Graph) -> None:
        import operator

        from torch._subclasses.fake_tensor import FakeTensor
        from torch.fx.passes.fake_tensor_prop import FakeTensorProp

        module = graph.owning_module
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        values = [n.meta.get("example_value", n.meta.get("val")) for n in placeholders]
        modes = [v.fake_mode for v in values if isinstance(v, FakeTensor)]
        if module is None or not modes:
            return
        FakeTensorProp(module, modes[0]).propagate_dont_convert_inputs(*values)
        for node in list(graph.nodes):
            if node.op == "call_function" and node.target in (operator.mul, torch.mul) \
                    and len(node.args) == 2 and node.args[1] == 1 \
                    and isinstance(node.args[0], torch.fx.Node):
                before, after = node.args[0].meta.get("val"), node.meta.get("val")
                if before is not None and after is not None and \
                        before.shape == after.shape and before.dtype == after.dtype:
                    node.replace_all_uses_with(node.args[0])
                    graph.erase_node(node)


CUSTOM: dict[str, Callable[[], Any]] = {
    "none": lambda: None,
    "uuid": lambda: TimedPass("bench-noop-v1"),
    "nouuid": lambda: TimedPass(None),
    "fakeprop": lambda: FakePropPass("bench-fakeprop-v1"),
}


class Chain(torch.nn.Module):
    def __init__(self, links: int) -> None:
        super().__init__()
        self.links = links

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.links):
            x = x * 1 + 0.001 * (i % 7)  # two FX nodes a link; "* 1" for FakePropPass
        return x


def convbn(blocks: int) -> torch.nn.Module:
    layers: list[torch.nn.Module] = [torch.nn.Conv2d(3, 16, 3, padding=1)]
    for _ in range(blocks):
        layers += [torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def build(workload: str, size: int, mode: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if workload == "chain":
        return Chain(size), torch.randn(64, requires_grad=mode == "train")
    if workload == "transformer":
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
        model: torch.nn.Module = torch.nn.TransformerEncoder(layer, size,
                                                             enable_nested_tensor=False)
        return model.train(mode == "train"), torch.randn(2, 16, 64)
    if workload == "convbn":
        return convbn(size).eval(), torch.randn(1, 3, 16, 16)
    if workload == "resnet50":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "test" / "dynamo"))
        from real_models import make_real_model

        return make_real_model("resnet50", batch=size)
    raise SystemExit(f"unknown workload {workload!r}")


def main(workload: str, size: int, mode: str, custom: str) -> None:
    from torch._inductor import compile_fx
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    valid_vec_isa_list()  # the per-process ISA probe, outside the clock
    model, x = build(workload, size, mode)
    expected = model(x)

    real = compile_fx.run_pre_grad_passes
    pre_grad = {"calls": 0, "seconds": 0.0, "nodes": 0}

    def timed(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        pre_grad["calls"] += 1
        pre_grad["nodes"] = max(pre_grad["nodes"], len(gm.graph.nodes))
        start = time.perf_counter()
        try:
            return real(gm, example_inputs)
        finally:
            pre_grad["seconds"] += time.perf_counter() - start

    # Inference runs under no_grad, as real inference does: a module whose
    # parameters require grad, called with grad on and never backwarded, is
    # compiled as a training graph whose AOTAutograd entry is only saved once
    # the backward compiles, so it would never hit.
    with (
        torch.no_grad() if mode == "infer" else contextlib.nullcontext(),
        functorch_config.patch(enable_autograd_cache=True),
        inductor_config.patch({"fx_graph_cache": True, "pre_grad_custom_pass": CUSTOM[custom]()}),
        unittest.mock.patch.object(compile_fx, "run_pre_grad_passes", timed),
    ):
        start = time.perf_counter()
        compiled = torch.compile(model)
        out = compiled(x)
        if mode == "train":
            out.sum().backward()
        seconds = time.perf_counter() - start
    if mode == "train":
        model.zero_grad()
    tolerance = 5e-4 if workload == "resnet50" else 1e-4
    tolerance = {"atol": tolerance, "rtol": tolerance}
    print(json.dumps({
        "seconds_to_first_result": seconds,
        "pre_grad_seconds": pre_grad["seconds"],
        "pre_grad_calls": pre_grad["calls"],
        "custom_pass_seconds": PASS_SECONDS[0],
        "graph_nodes": pre_grad["nodes"],
        "aot_hit": counters["aot_autograd"]["autograd_cache_hit"],
        "aot_miss": counters["aot_autograd"]["autograd_cache_miss"],
        "aot_bypass": counters["aot_autograd"]["autograd_cache_bypass"],
        "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
        # A deep network's rounding (resnet50: about 2e-4 on outputs up to 8)
        # gets real_models.py's tolerance.
        "matches_eager": bool(torch.allclose(out.detach(), expected.detach(), **tolerance)),
        "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
