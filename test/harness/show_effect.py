"""Compile a small model cold, then warm, and report what Inductor did.

Usage: PY test/harness/show_effect.py     (prints one JSON report as its last line)

Runs under the interpreter whose torch is being shown. For each scenario
(no custom pre-grad pass; a pass with a uuid; a pass without one) it trains
one step of a small MLP with torch.compile against an empty cache directory
(cold), resets Dynamo and does it again (warm), counting how often Inductor
ran its pre-grad passes and the AOTAutograd / FX graph cache hits, misses and
bypasses. A last scenario is the results fix: a conv -> BatchNorm module
compiled for CPU inference with freezing through compile_fx, compared with
eager (freezing bypasses the AOTAutogradCache), and the same for a real
network: torchvision's resnet50 (random weights, trained-like BatchNorms;
test/dynamo/real_models.py) through compile_fx and through torch.compile. A
result that differs from eager carries its max abs error.
test/harness/effect_table.py prints the reports of several torch builds side
by side.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dynamo"))

import torch  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402
from torch._functorch import config as functorch_config  # noqa: E402
from torch._inductor import config as inductor_config  # noqa: E402
from torch._inductor.utils import fresh_cache  # noqa: E402

from torch._inductor.custom_graph_pass import CustomGraphPass  # noqa: E402

from pregrad_passes import count_run_pre_grad_passes  # noqa: E402


class NoopPass(CustomGraphPass):
    """Leaves the graph alone and keeps no state: on stock torch the pass object
    is pickled into the cache key, so a pass that counted its own calls would
    miss for that reason alone."""

    def __init__(self, uuid: Any) -> None:
        self._uuid = uuid

    def __call__(self, graph: torch.fx.Graph) -> None:
        pass

    def uuid(self) -> Any:
        return self._uuid


SCENARIOS: dict[str, Callable[[], Any]] = {
    "no custom pass": lambda: None,
    "custom pass with uuid": lambda: NoopPass("demo-pass-v1"),
    "custom pass without uuid": lambda: NoopPass(None),
}


def train_step(model: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    model.zero_grad()
    out = model(inputs)
    out.sum().backward()
    return out.detach()


def outcome(pre_grad_runs: int, matches_eager: bool, error: float = 0.0) -> dict[str, Any]:
    """One compile's report: pre-grad pass runs, the caches' counters since
    they were last cleared, whether the result equals eager and, for the
    freezing scenarios, the max abs error."""
    return {
        "max_abs_error": error,
        "pre_grad_runs": pre_grad_runs,
        "aot_hit": counters["aot_autograd"]["autograd_cache_hit"],
        "aot_miss": counters["aot_autograd"]["autograd_cache_miss"],
        "aot_bypass": counters["aot_autograd"]["autograd_cache_bypass"],
        "fx_hit": counters["inductor"]["fxgraph_cache_hit"],
        "fx_miss": counters["inductor"]["fxgraph_cache_miss"],
        "fx_bypass": counters["inductor"]["fxgraph_cache_bypass"],
        "matches_eager": matches_eager,
    }


def compile_once(model: torch.nn.Module, inputs: torch.Tensor, calls: list[int]) -> dict[str, Any]:
    torch._dynamo.reset()
    counters.clear()
    before = calls[0]
    out = train_step(torch.compile(model), inputs)
    return outcome(calls[0] - before, bool(torch.allclose(out, model(inputs).detach())))


def conv_bn_freezing(calls: list[int]) -> dict[str, Any]:
    """The results fix: conv -> BatchNorm in eval mode, CPU inference with
    freezing, an FX graph from symbolic_trace handed to compile_fx. Upstream
    2.12.0-2.15.0 fold the BN after the conv weights were captured."""
    from torch._inductor.compile_fx import compile_fx

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8)).eval()
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    inputs = torch.randn(2, 3, 8, 8)
    torch._dynamo.reset()
    counters.clear()
    before = calls[0]
    with torch.no_grad(), inductor_config.patch(freezing=True):
        expected = model(inputs)
        out = compile_fx(torch.fx.symbolic_trace(model), [inputs])(inputs)
    out = out[0] if isinstance(out, (list, tuple)) else out
    return outcome(calls[0] - before, bool(torch.allclose(out, expected, atol=1e-4, rtol=1e-4)),
                   float((out - expected).abs().max()))


def real_model_freezing(entry: str, calls: list[int]) -> dict[str, Any]:
    """resnet50 for CPU inference with freezing: `compile_fx` on its
    symbolic_trace (convs stay modules, as in fx-based pipelines) or
    `torch.compile` (Dynamo lifts the parameters)."""
    from real_models import compile_with_freezing, make_real_model, max_abs_error, TOLERANCE

    model, inputs = make_real_model("resnet50")
    with torch.no_grad():
        expected = model(inputs)
    counters.clear()
    before = calls[0]
    out = compile_with_freezing(entry, model, inputs)
    return outcome(calls[0] - before, bool(torch.allclose(out, expected, **TOLERANCE)),
                   max_abs_error(out, expected))


def main() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    )
    inputs = torch.randn(4, 32)
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "has_pre_grad_pass_timing": hasattr(inductor_config, "pre_grad_pass_timing"),
        "scenarios": {},
    }
    for name, make_pass in SCENARIOS.items():
        with (
            tempfile.TemporaryDirectory() as cache_dir,
            fresh_cache(dir=cache_dir),
            functorch_config.patch(enable_autograd_cache=True),
            inductor_config.patch(
                {"fx_graph_cache": True, "pre_grad_custom_pass": make_pass()}
            ),
            count_run_pre_grad_passes() as calls,
        ):
            cold = compile_once(model, inputs, calls)
            warm = compile_once(model, inputs, calls)
        report["scenarios"][name] = {"cold": cold, "warm": warm}
        print(f"  {torch.__version__}: {name} done", file=sys.stderr, flush=True)
    name = "conv-bn, freezing (fx)"
    with (
        tempfile.TemporaryDirectory() as cache_dir,
        fresh_cache(dir=cache_dir),
        count_run_pre_grad_passes() as calls,
    ):
        cold = conv_bn_freezing(calls)
        warm = conv_bn_freezing(calls)
    report["scenarios"][name] = {"cold": cold, "warm": warm}
    print(f"  {torch.__version__}: {name} done", file=sys.stderr, flush=True)
    from real_models import torchvision_missing

    missing = torchvision_missing()
    for name, entry in (("resnet50, freezing (fx)", "compile_fx"),
                        ("resnet50, freezing (compile)", "torch_compile")):
        if missing:
            print(f"  {torch.__version__}: {name} left out: {missing}", file=sys.stderr, flush=True)
            continue
        with (
            tempfile.TemporaryDirectory() as cache_dir,
            fresh_cache(dir=cache_dir),
            count_run_pre_grad_passes() as calls,
        ):
            cold = real_model_freezing(entry, calls)
            warm = real_model_freezing(entry, calls)
        report["scenarios"][name] = {"cold": cold, "warm": warm}
        print(f"  {torch.__version__}: {name} done", file=sys.stderr, flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
