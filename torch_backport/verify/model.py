"""`--verify --model MODULE:FACTORY`: the user's own model through every
entry point Inductor has for inference, under torch.no_grad() with
freezing, against eager; one row per entry point, printed as it finishes.

FACTORY (a callable in MODULE, imported from the current directory, or a
file path) returns `(model, example_inputs)`. An entry point the model cannot
go through (symbolic_trace or torch.export refuses it) says so and is not a
failure; a result further from eager than verify_cells.tolerance is.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import torch

from torch_backport.infra.errors import BackportError, Failed
from torch_backport.verify.cells import max_abs_error, tolerance


class CannotGoThrough(BackportError):
    """The model cannot be handed to this entry point (tracing or export
    refused it): said, not a failure."""


def traced(model: torch.nn.Module) -> torch.fx.GraphModule:
    try:
        return torch.fx.symbolic_trace(model)
    except Exception as problem:
        raise CannotGoThrough(f"symbolic_trace: {type(problem).__name__}: {problem}") from None


def exported(model: torch.nn.Module, inputs: Tuple[Any, ...]) -> Any:
    try:
        return torch.export.export(model, inputs)
    except Exception as problem:
        raise CannotGoThrough(f"torch.export: {type(problem).__name__}: {problem}") from None


def via_compile_fx(model: torch.nn.Module, inputs: Tuple[Any, ...], work: Path) -> Any:
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(traced(model), list(inputs))(*inputs)


def via_inductor_compile(model: torch.nn.Module, inputs: Tuple[Any, ...], work: Path) -> Any:
    return torch._inductor.compile(traced(model), list(inputs))(*inputs)


def via_export_compile_fx(model: torch.nn.Module, inputs: Tuple[Any, ...], work: Path) -> Any:
    from torch._inductor.compile_fx import compile_fx
    return compile_fx(exported(model, inputs).module(), list(inputs))(*inputs)


def via_aot_inductor(model: torch.nn.Module, inputs: Tuple[Any, ...], work: Path) -> Any:
    program = exported(model, inputs)
    package = torch._inductor.aoti_compile_and_package(program,
                                                       package_path=str(work / "model.pt2"))
    return torch._inductor.aoti_load_package(package)(*inputs)


def via_torch_compile(model: torch.nn.Module, inputs: Tuple[Any, ...], work: Path) -> Any:
    return torch.compile(model)(*inputs)


Entry = Callable[[torch.nn.Module, Tuple[Any, ...], Path], Any]
# The entry points that take a module graph: the ones the late fold gets wrong.
MODULE_GRAPH_ENTRY_POINTS = ("compile_fx(torch.fx.symbolic_trace(m))",
                             "torch._inductor.compile(torch.fx.symbolic_trace(m))")
ENTRY_POINTS: List[Tuple[str, Entry]] = [
    (MODULE_GRAPH_ENTRY_POINTS[0], via_compile_fx),
    (MODULE_GRAPH_ENTRY_POINTS[1], via_inductor_compile),
    ("compile_fx(torch.export.export(m).module())", via_export_compile_fx),
    ("AOTInductor: aoti_compile_and_package(export(m))", via_aot_inductor),
    ("torch.compile(m)", via_torch_compile),
]


def users_code(spec: str, doing: str, call: Callable[[], Any]) -> Any:
    """call(); an exception the user's code raises becomes Failed naming
    it, its traceback printed first (a module not found needs none)."""
    try:
        return call()
    except Failed:
        raise
    except ModuleNotFoundError as problem:
        if problem.name != spec.rpartition(":")[0].split(".")[0]:
            traceback.print_exc()
        raise Failed(f"--model {spec}: {doing}: {problem} (looked in the current directory "
                     "and on sys.path)") from None
    except Exception as problem:
        traceback.print_exc()
        raise Failed(f"--model {spec}: {doing} raised {type(problem).__name__}: {problem} "
                     "(the traceback is above)") from None


def import_module(spec: str) -> Any:
    """MODULE of MODULE:FACTORY: a .py file (its folder first on sys.path,
    as `python FILE` has it), or a module name found from the current
    directory first, as `python -m` finds it."""
    module_name = spec.rpartition(":")[0]
    if not (module_name.endswith(".py") or "/" in module_name):
        sys.path.insert(0, str(Path.cwd()))
        return importlib.import_module(module_name)
    path = Path(module_name)
    if not path.is_file():
        raise Failed(f"--model {spec}: {path} is not a file")
    sys.path.insert(0, str(path.resolve().parent))
    found = importlib.util.spec_from_file_location(path.stem, path)
    assert found is not None and found.loader is not None
    module = importlib.util.module_from_spec(found)
    sys.modules[path.stem] = module
    found.loader.exec_module(module)
    return module


def model_and_inputs(spec: str) -> Tuple[torch.nn.Module, Tuple[Any, ...]]:
    """(model in eval mode, example inputs as a tuple) from MODULE:FACTORY."""
    module_name, _, name = spec.rpartition(":")
    module = users_code(spec, f"importing {module_name}", lambda: import_module(spec))
    factory = getattr(module, name, None)
    if not callable(factory):
        raise Failed(f"--model {spec}: {module_name} has no callable {name!r}")
    result = users_code(spec, "the factory", factory)
    if not (isinstance(result, tuple) and len(result) == 2
            and isinstance(result[0], torch.nn.Module)):
        raise Failed(f"--model {spec}: the factory must return (model, example_inputs), a "
                     "torch.nn.Module and a tuple of inputs; it returned "
                     f"{type(result).__name__}")
    model, inputs = result
    if isinstance(inputs, dict):
        raise Failed(f"--model {spec}: example_inputs is a dict; give the inputs as a tuple "
                     "of positional arguments (keyword inputs are not supported)")
    if not isinstance(inputs, tuple):
        inputs = tuple(inputs) if isinstance(inputs, list) else (inputs,)
    if model.training:
        print("note: the model was in training mode; it is checked in eval mode "
              "(model.eval()), as inference with freezing runs it")
    return model.eval(), inputs


def describe(inputs: Tuple[Any, ...], expected: Any) -> str:
    def shape(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return f"{'x'.join(map(str, value.shape)) or 'scalar'} {str(value.dtype)[6:]}"
        return type(value).__name__
    from torch_backport.verify.cells import leaves
    return (f"inputs {', '.join(shape(v) for v in inputs)}; outputs "
            f"{', '.join(shape(v) for v in leaves(expected))}")


def run_entry_point(label: str, entry: Entry, model: torch.nn.Module,
                    inputs: Tuple[Any, ...], expected: Any, allowed: float, work: Path) -> str:
    """Run one entry point on `model` (a copy); print its row; its verdict word."""
    from torch._inductor import config

    started = time.monotonic()
    torch._dynamo.reset()
    try:
        with torch.no_grad(), config.patch(freezing=True):
            error = max_abs_error(entry(model, inputs, work), expected)
    except CannotGoThrough as why:
        print(f"{label:<52} {'-':<14} not applicable: {one_line(str(why))}", flush=True)
        return "not applicable"
    except Exception as problem:  # Inductor's own failure: the row says so, traceback first
        traceback.print_exc()
        print(f"{label:<52} {'-':<14} RAISED {type(problem).__name__}: "
              f"{one_line(str(problem))}", flush=True)
        return "raised"
    word = "right" if error <= allowed else "WRONG"
    print(f"{label:<52} {error:<14.3g} {word} ({time.monotonic() - started:.0f} s)",
          flush=True)
    return word


def one_line(text: str, width: int = 160) -> str:
    """A message's first line, cut to fit a table row (tracebacks and
    export's explanations run to pages; stderr has the whole of them)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= width else first[:width - 3] + "..."


def copies(model: torch.nn.Module) -> Callable[[], torch.nn.Module]:
    """A fresh deep copy of the model for each entry point (a compile may
    rewrite the modules it is given), or the model itself where it cannot be
    copied, said once."""
    try:
        copy.deepcopy(model)
    except Exception as problem:
        print(f"note: the model cannot be deep-copied ({type(problem).__name__}: "
              f"{one_line(str(problem))}); each entry point gets the model itself")
        return lambda: model
    return lambda: copy.deepcopy(model)


def verify_model(spec: str, work: Path) -> Dict[str, str]:
    """Print the table; each entry point's verdict word."""
    model, inputs = model_and_inputs(spec)

    def eager() -> Any:
        with torch.no_grad():
            return model(*inputs)

    expected = users_code(spec, "running the model eagerly on the example inputs", eager)
    allowed = tolerance(expected)
    print(f"model {type(model).__name__} from {spec}: {describe(inputs, expected)}")
    print(f"tolerance {allowed:.3g}: max(1, max |eager output|) times 1e-3 for float32 "
          "(1e-2 float16, 5e-2 bfloat16; docs/results-fixes.md#am-i-affected)")
    print(f"{'entry point (no_grad, freezing)':<52} {'max abs error':<14} verdict", flush=True)
    fresh = copies(model)
    words = {label: run_entry_point(label, entry, fresh(), inputs, expected, allowed, work)
             for label, entry in ENTRY_POINTS}
    counts = [f"{list(words.values()).count(word)} {word.lower()}"
              for word in ("right", "WRONG", "raised", "not applicable")]
    print(f"verify --model: {', '.join(counts)}")
    return words


def closing_lines(words: Dict[str, str]) -> List[str]:
    """What the rows that are not right mean (the results defect's advice
    is command.py's: it knows the install)."""
    lines = []
    others = [label for label, word in words.items()
              if word == "WRONG" and label not in MODULE_GRAPH_ENTRY_POINTS]
    raised = [label for label, word in words.items() if word == "raised"]
    if others:
        lines.append(f"  wrong through {', '.join(others)}: not the defect the series fix "
                     "(these paths lift the parameters); worth a report to PyTorch")
    if raised:
        lines.append(f"  raised: {', '.join(raised)} (tracebacks above): not a defect this "
                     "project knows")
    return lines
