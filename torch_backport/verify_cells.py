"""The cells of `--verify`: each is one behaviour a topic promises, measured
with this process's own torch (the real compile_fx, torch._inductor.compile
and torch.compile, the real caches) beside what it should be.

Imported only by verify.py, in the target interpreter, after it gave the
process an Inductor cache of its own: the warm-hit cell needs a cold cache
to start from, and nothing here may fill the user's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch import nn

# What a result may differ from eager by, relative to the output's size (at
# least 1). Folding a BatchNorm into a conv reorders the arithmetic: done
# right, torchvision's resnets differ from eager by under 1e-5 of the output
# in float32 (docs/results-fixes.md); done wrong, by 0.3 to 1 times it.
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


def leaves(value: Any) -> List[Any]:
    from torch.utils._pytree import tree_leaves
    return list(tree_leaves(value))


def tolerance(expected: Any) -> float:
    """RELATIVE_TOLERANCE of the outputs' dtype times max(1, max |output|);
    0 for integer and boolean outputs."""
    tensors = [leaf for leaf in leaves(expected) if isinstance(leaf, torch.Tensor)]
    floating = [t for t in tensors if t.is_floating_point() and t.numel()]
    if not floating:
        return 0.0
    relative = max(RELATIVE_TOLERANCE.get(t.dtype, 1e-3) for t in floating)
    size = max(float(t.detach().abs().max()) for t in floating)
    return relative * max(1.0, size)


def max_abs_error(actual: Any, expected: Any) -> float:
    """The largest |actual - expected| over every output; inf where the
    outputs differ in number, shape or a non-tensor value."""
    got, want = leaves(actual), leaves(expected)
    if len(got) != len(want):
        return float("inf")
    worst = 0.0
    for a, e in zip(got, want):
        if not isinstance(e, torch.Tensor):
            worst = max(worst, 0.0 if a == e else float("inf"))
        elif not isinstance(a, torch.Tensor) or a.shape != e.shape:
            return float("inf")
        elif e.numel():
            worst = max(worst, float((a.detach().double() - e.detach().double()).abs().max()))
    return worst


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


def against_eager(label: str, entry: str, model: nn.Module, inputs: Tuple[torch.Tensor, ...],
                  defect: str) -> Cell:
    torch.manual_seed(0)
    with torch.no_grad():
        expected = model(*inputs)
    error = max_abs_error(compiled_with_freezing(entry, model, inputs), expected)
    allowed = tolerance(expected)
    return Cell(PRE_GRAD, label, f"eager, within {allowed:.0e}", f"off by {error:.3g}",
                error <= allowed, defect)


LATE_FOLD = ("results: with freezing, the late pre-grad passes fold each BatchNorm into "
             "its conv after the conv's weights were captured, so compile_fx and "
             "torch._inductor.compile on a module graph return wrong numbers (upstream "
             "2.12.0 through 2.15.0; docs/results-fixes.md)")
SHARED_FOLD = ("results: fuse_conv_bn folds a BatchNorm into a conv module that has "
               "another use too, which then gets the BatchNorm as well (every upstream "
               "release; docs/results-fixes.md)")


def conv_bn_cells() -> List[Cell]:
    torch.manual_seed(0)
    model = set_batchnorms_far_from_identity(ConvBN())
    return [against_eager(f"conv->BN, freezing, {entry}(symbolic_trace(m))", entry, model,
                          images(1), LATE_FOLD)
            for entry in ("compile_fx", "torch._inductor.compile")]


def shared_conv_cell() -> Cell:
    torch.manual_seed(0)
    model = set_batchnorms_far_from_identity(SharedConv())
    return against_eager("shared conv, freezing, compile_fx(symbolic_trace(m))", "compile_fx",
                         model, images(2), SHARED_FOLD)


def caches_on() -> Any:
    """The FX graph cache and the AOTAutogradCache on, locally only (a
    remote cache the environment names would answer for another process)."""
    import contextlib

    from torch._functorch import config as functorch_config
    from torch._inductor import config

    stack = contextlib.ExitStack()
    stack.enter_context(functorch_config.patch(enable_autograd_cache=True))
    stack.enter_context(config.patch(fx_graph_cache=True, fx_graph_remote_cache=False))
    if hasattr(functorch_config, "enable_remote_autograd_cache"):
        stack.enter_context(functorch_config.patch(enable_remote_autograd_cache=False))
    return stack


def warm_hit_cell() -> Cell:
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
    return Cell(PRE_GRAD, "warm compile: AOTAutogradCache hit, pre-grad passes run",
                "hit 1, passes 0", f"hit {hits}, passes {calls[0]}",
                hits == 1 and calls[0] == 0,
                "feature: a warm compile that hits the AOTAutogradCache still runs every "
                "pre-grad pass (torch before 2.12: no pre_grad_pass_timing)")


def region_without_dtype(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    with torch.autocast(device_type="cpu"):
        return a @ b


def matmul_relu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a @ b).relu()


def autocast_cells() -> List[Cell]:
    """float16 compiles after bfloat16 ones of the same function, on a warm
    cache: an autocast region naming no dtype (it takes the ambient one), and
    a region at the call site. Each must come back float16."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(32, 32, generator=generator) for _ in range(2))
    got: Dict[str, torch.dtype] = {}
    ambient = torch.get_autocast_dtype("cpu")
    with caches_on():
        try:
            for dtype in (torch.bfloat16, torch.float16):
                torch.set_autocast_dtype("cpu", dtype)
                torch._dynamo.reset()
                got["region"] = torch.compile(region_without_dtype)(a, b).dtype
        finally:
            torch.set_autocast_dtype("cpu", ambient)
        for dtype in (torch.bfloat16, torch.float16):
            torch._dynamo.reset()
            with torch.autocast("cpu", dtype=dtype):
                got["call site"] = torch.compile(matmul_relu)(a, b).dtype
    stale = ("autocast: a graph compiled under bfloat16 is served from the AOTAutogradCache "
             "to a float16 compile ({}); docs/results-fixes.md#autocast-and-the-aotautogradcache")
    return [Cell(AUTOCAST, f"autocast {form}: float16 compile after bfloat16", "float16",
                 str(dtype).replace("torch.", ""), dtype == torch.float16, stale.format(why))
            for form, dtype, why in (
                ("region without dtype", got["region"], "a region that names no dtype "
                 "takes the ambient one, which upstream does not key: cf. pytorch#191110"),
                ("at the call site", got["call site"], "the ambient autocast dtype is keyed "
                 "from 2.13: pytorch#181564"))]


# topic -> the functions that measure its cells, in the order printed.
CELLS: Dict[str, List[Callable[[], Any]]] = {
    PRE_GRAD: [conv_bn_cells, shared_conv_cell, warm_hit_cell],
    AUTOCAST: [autocast_cells],
}
