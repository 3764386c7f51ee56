"""The cells of `--verify`: each is one behaviour a topic promises, measured
with this process's own torch (the real compile_fx, torch._inductor.compile
and torch.compile, the real caches) beside what it should be.

Imported only by command.py, in the target interpreter, after it gave the
process an Inductor cache of its own: the warm-hit cell needs a cold cache
to start from, and nothing here may fill the user's.
"""

from __future__ import annotations

import contextlib
import dataclasses
from math import inf
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch
from torch import nn

# What a result may differ from eager by, relative to the output's size (at
# least 1). Folding a BatchNorm into a conv reorders the arithmetic: done
# right, torchvision's resnets differ from eager by under 4e-5 of the output
# in float32; done wrong, by half to ten times it (docs/results-fixes.md).
RELATIVE_TOLERANCE = {torch.float64: 1e-3, torch.float32: 1e-3, torch.float16: 1e-2,
                      torch.bfloat16: 5e-2}
PRE_GRAD = "pre-grad-pass-timing"
AUTOCAST = "autocast-cache-key"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One measured behaviour: what it should be beside what it is."""
    topic: str
    label: str
    expected: str
    actual: str
    holds: bool
    defect: str  # what a cell that does not hold tells about the install
    raised: bool = False  # the measurement itself failed: no defect is known


@dataclasses.dataclass(frozen=True)
class CellSpec:
    """A cell before it is measured: `measure` returns (expected, actual,
    holds)."""
    topic: str
    label: str
    defect: str
    measure: Callable[[], Tuple[str, str, bool]]

    def run(self) -> Cell:
        return Cell(self.topic, self.label, *self.measure(), self.defect)


def leaves(value: Any) -> List[Any]:
    """The tensors and other values of a (nested) output, in order."""
    from torch.utils._pytree import tree_leaves
    return list(tree_leaves(value))


def tolerance(expected: Any) -> float:
    """RELATIVE_TOLERANCE of the outputs' dtype times max(1, max |finite
    output|); 0 for integer and boolean outputs."""
    floating = [leaf.detach() for leaf in leaves(expected) if isinstance(leaf, torch.Tensor)
                and (leaf.is_floating_point() or leaf.is_complex()) and leaf.numel()]
    if not floating:
        return 0.0
    relative = max(RELATIVE_TOLERANCE.get(t.dtype, 1e-3) for t in floating)
    finite = [t.abs()[torch.isfinite(t)] for t in floating]
    size = max((float(t.max()) for t in finite if t.numel()), default=0.0)
    return relative * max(1.0, size)


def leaf_error(actual: Any, expected: Any) -> float:
    """|actual - expected| at its largest; inf for another shape or type, a
    value that is not equal, or a NaN or infinity eager does not have there."""
    if not isinstance(expected, torch.Tensor) or not isinstance(actual, torch.Tensor):
        try:
            return 0.0 if type(actual) is type(expected) and bool(actual == expected) else inf
        except Exception:  # an == that is not a truth value (arrays): not the same
            return inf
    if actual.shape != expected.shape:
        return inf
    if not expected.numel():
        return 0.0
    wide = torch.complex128 if expected.is_complex() or actual.is_complex() else torch.float64
    got, want = actual.detach().to("cpu", wide), expected.detach().to("cpu", wide)
    same = (got == want) | (torch.isnan(got) & torch.isnan(want))
    difference = torch.where(same, torch.zeros_like(got), got - want).abs()
    return float(difference.max()) if bool(torch.isfinite(difference).all()) else inf


def max_abs_error(actual: Any, expected: Any) -> float:
    """The largest leaf_error over every output; inf where the outputs
    differ in number."""
    got, want = leaves(actual), leaves(expected)
    if len(got) != len(want):
        return inf
    return max((leaf_error(a, e) for a, e in zip(got, want)), default=0.0)


def set_batchnorms_far_from_identity(model: nn.Module) -> nn.Module:
    """Eval mode; running statistics and affine parameters that a wrong fold
    shows in the numbers (a fresh BatchNorm is near identity and hides it)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.running_mean.uniform_(-1.0, 1.0, generator=generator)
                module.running_var.uniform_(0.5, 2.0, generator=generator)
                module.weight.uniform_(0.5, 2.0, generator=generator)
                module.bias.uniform_(-1.0, 1.0, generator=generator)
    return model.eval()


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class SharedConv(nn.Module):
    """One conv module, called before a BatchNorm and on its own."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.bn(self.conv(x)), self.conv(y)


def images(count: int) -> Tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(1)
    return tuple(torch.randn(2, 3, 6, 6, generator=generator) for _ in range(count))


def compiled_with_freezing(entry: str, model: nn.Module, inputs: Tuple[torch.Tensor, ...]) -> Any:
    """`model` (a symbolic_trace'd module: its convs stay modules, as
    fx-based pipelines hand them to Inductor) compiled for inference with
    freezing through `entry`, run on `inputs`."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx

    compile_graph: Callable[..., Any] = (compile_fx if entry == "compile_fx"
                                         else torch._inductor.compile)
    torch._dynamo.reset()
    with torch.no_grad(), config.patch(freezing=True):
        return compile_graph(torch.fx.symbolic_trace(model), list(inputs))(*inputs)


def against_eager(entry: str, model: nn.Module,
                  inputs: Tuple[torch.Tensor, ...]) -> Tuple[str, str, bool]:
    with torch.no_grad():
        expected = model(*inputs)
    error = max_abs_error(compiled_with_freezing(entry, model, inputs), expected)
    allowed = tolerance(expected)
    return f"eager, within {allowed:.0e}", f"off by {error:.3g}", error <= allowed


def conv_bn(entry: str) -> Tuple[str, str, bool]:
    torch.manual_seed(0)
    return against_eager(entry, set_batchnorms_far_from_identity(ConvBN()), images(1))


def shared_conv() -> Tuple[str, str, bool]:
    torch.manual_seed(0)
    return against_eager("compile_fx", set_batchnorms_far_from_identity(SharedConv()),
                         images(2))


@contextlib.contextmanager
def caches_on() -> Iterator[None]:
    """The FX graph cache and the AOTAutogradCache on, locally only (a
    remote cache the environment names would answer for another process),
    whatever TORCHINDUCTOR_* variables the user's environment sets."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config

    inductor = {"fx_graph_cache": True, "fx_graph_remote_cache": False, "freezing": False}
    if hasattr(config, "force_disable_caches"):
        inductor["force_disable_caches"] = False
    functorch = {"enable_autograd_cache": True}
    if hasattr(functorch_config, "enable_remote_autograd_cache"):
        functorch["enable_remote_autograd_cache"] = False
    with config.patch(inductor), functorch_config.patch(functorch):
        yield


def warm_hit() -> Tuple[str, str, bool]:
    """A second compile of the same module after torch._dynamo.reset() and
    clearing the in-memory caches: it must hit the AOTAutogradCache and run
    no pre-grad pass (counted by wrapping Inductor's run_pre_grad_passes)."""
    from torch._dynamo.utils import counters
    from torch._inductor import compile_fx
    from torch._inductor.utils import clear_caches

    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.ReLU()), torch.randn(4, 8)
    real, calls = compile_fx.run_pre_grad_passes, [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    with caches_on(), torch.no_grad():
        torch._dynamo.reset()
        torch.compile(model)(x)
        torch._dynamo.reset()
        clear_caches()
        counters.clear()
        compile_fx.run_pre_grad_passes = counting
        try:
            torch.compile(model)(x)
        finally:
            compile_fx.run_pre_grad_passes = real
    hits = counters["aot_autograd"]["autograd_cache_hit"]
    return "hit 1, passes 0", f"hit {hits}, passes {calls[0]}", hits == 1 and calls[0] == 0


def region_without_dtype(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch.autocast(device_type="cpu"):
        return a @ b


def matmul_relu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b).relu()


def operands() -> Tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(32, 32, generator=generator),
            torch.randn(32, 32, generator=generator))


def float16_after_bfloat16(dtype: torch.dtype) -> Tuple[str, str, bool]:
    name = str(dtype).replace("torch.", "")
    return "float16", name, dtype == torch.float16


def autocast_region() -> Tuple[str, str, bool]:
    """A region that names no dtype takes the ambient one: compiled under
    bfloat16, then float16, on a warm cache."""
    a, b = operands()
    ambient = torch.get_autocast_dtype("cpu")
    with caches_on():
        try:
            for dtype in (torch.bfloat16, torch.float16):
                torch.set_autocast_dtype("cpu", dtype)
                torch._dynamo.reset()
                got = torch.compile(region_without_dtype)(a, b).dtype
        finally:
            torch.set_autocast_dtype("cpu", ambient)
    return float16_after_bfloat16(got)


def autocast_call_site() -> Tuple[str, str, bool]:
    """An autocast-free function called inside autocast(bfloat16), then
    autocast(float16), on a warm cache."""
    a, b = operands()
    with caches_on():
        for dtype in (torch.bfloat16, torch.float16):
            torch._dynamo.reset()
            with torch.autocast("cpu", dtype=dtype):
                got = torch.compile(matmul_relu)(a, b).dtype
    return float16_after_bfloat16(got)


LATE_FOLD = ("results: with freezing, the late pre-grad passes fold each BatchNorm into "
             "its conv after the conv's weights were captured, so compile_fx and "
             "torch._inductor.compile on a module graph return wrong numbers (upstream "
             "2.12.0 through 2.15.0; docs/results-fixes.md)")
SHARED_FOLD = ("results: fuse_conv_bn folds a BatchNorm into a conv module that has "
               "another use too, which then gets the BatchNorm as well (every upstream "
               "release; docs/results-fixes.md)")
# What a wrong module-graph row of --model means: either fold.
MODULE_GRAPH_FOLD = (
    "results: with freezing, compile_fx and torch._inductor.compile fold a BatchNorm into "
    "its conv wrongly on a module graph: after the conv's weights were captured (upstream "
    "2.12.0 through 2.15.0), or into a conv that has another use (every release); "
    "docs/results-fixes.md#am-i-affected")
STALE_AUTOCAST = ("autocast: a graph compiled under bfloat16 is served from the "
                  "AOTAutogradCache to a float16 compile ({}); "
                  "docs/results-fixes.md#autocast-and-the-aotautogradcache")
# topic -> its cells, in the order printed.
CELLS: Dict[str, List[CellSpec]] = {
    PRE_GRAD: [
        CellSpec(PRE_GRAD, "conv->BN, freezing, compile_fx(symbolic_trace(m))", LATE_FOLD,
                 lambda: conv_bn("compile_fx")),
        CellSpec(PRE_GRAD, "conv->BN, freezing, torch._inductor.compile(symbolic_trace(m))",
                 LATE_FOLD, lambda: conv_bn("torch._inductor.compile")),
        CellSpec(PRE_GRAD, "shared conv, freezing, compile_fx(symbolic_trace(m))", SHARED_FOLD,
                 shared_conv),
        CellSpec(PRE_GRAD, "warm compile: AOTAutogradCache hit, pre-grad passes run",
                 "feature: a warm compile that hits the AOTAutogradCache still runs every "
                 "pre-grad pass (torch before 2.12: no pre_grad_pass_timing)", warm_hit),
    ],
    AUTOCAST: [
        CellSpec(AUTOCAST, "autocast region without dtype: float16 compile after bfloat16",
                 STALE_AUTOCAST.format("a region that names no dtype takes the ambient one, "
                                       "which upstream does not key: cf. pytorch#191110"),
                 autocast_region),
        CellSpec(AUTOCAST, "autocast at the call site: float16 compile after bfloat16",
                 STALE_AUTOCAST.format("the ambient autocast dtype is keyed from 2.13: "
                                       "pytorch#181564"), autocast_call_site),
    ],
}
