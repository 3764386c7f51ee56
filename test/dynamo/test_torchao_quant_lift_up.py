"""torchao's x86 PT2E flow: a real client of the cache-aware pre-grad pass timing.

Importing torchao's x86 Inductor quantizer
(torchao.quantization.pt2e.quantizer.x86_inductor_quantizer) sets
`torch._inductor.config.pre_grad_custom_pass` to `quant_lift_up`; from
torchao 0.18.0 that is a `QuantLiftUp`, a CustomGraphPass whose uuid() hashes
its source file (pytorch/ao#4424). A small conv -> BatchNorm -> relu ->
linear model is quantized the way torchao's own x86 tests do it (a strict
`torch.export.export(...).module()`, X86InductorQuantizer with the default
config, prepare_pt2e, one calibration batch, convert_pt2e: a non-strict
export leaves the nodes without the `source_fn_stack` the quantizer matches
on, so nothing would be quantized) and compiled cold, then warm, in one
process and caches emptied for each test (conftest.py),
`torch._dynamo.reset()` between the compiles. The pass's calls are counted
by wrapping `QuantLiftUp.__call__`; the object in the config stays the one
torchao set, so its uuid, the cache key's part for it, is unchanged.

With the feature (upstream 2.12+, or 2.10-2.11 with the series applied) the
warm compile hits the AOTAutogradCache without running the pass; on stock
2.10 and 2.11 it runs on every compile (stock_expectations.py). With
freezing both builds bypass the AOTAutogradCache and the FX graph cache, so
the pass runs on each compile. test/torchao.tsv pins the torchao each
release's venv gets (scripts/venv.sh); where it says "none" every test here
skips with the file's reason (pytest -rs shows it).
"""

from __future__ import annotations

import copy
import importlib
import unittest
import unittest.mock
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files
from torch._inductor.test_case import TestCase

from pregrad_passes import cache_counts

TORCHAO_TSV = Path(__file__).resolve().parents[1] / "torchao.tsv"
QUANTIZER = "torchao.quantization.pt2e.quantizer.x86_inductor_quantizer"
# Compiled and eager compute the same float32 ops on the same dequantized
# int8/uint8 values; only the fused kernels' order of float32 operations
# differs (the issue measured 6e-8; this model gives 0). One activation a
# quantization step off would move an output by about 1e-3 (the linear's
# input scale is ~6e-3, its weights ~0.05), so atol 1e-5 catches that. These
# are the tolerances of torchao's own x86 Inductor tests (_test_common).
ATOL, RTOL = 1e-5, 1.3e-6


def torchao_pin(version: str = torch.__version__) -> tuple[str, str]:
    """(torchao version or "none", reason) for this torch, from test/torchao.tsv."""
    release = version.split("+", 1)[0]
    for line in TORCHAO_TSV.read_text().splitlines():
        if line and not line.startswith("#"):
            row, pin, reason = line.split("\t", 2)
            if row == release:
                return pin, reason
    return "none", f"test/torchao.tsv has no row for torch {release}"


PIN, PIN_REASON = torchao_pin()


class ConvBnReluLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 6 * 6, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A reshape, not torch.flatten: QuantLiftUp lifts a quantize above
        # views, transposes, permutes and reshapes only.
        features = torch.relu(self.bn(self.conv(x)))
        return self.fc(features.reshape(features.shape[0], -1))


def counts(**nonzero: int) -> dict[str, int]:
    return {key: nonzero.get(key, 0) for key in cache_counts(bypasses=True)}


@unittest.skipIf(PIN == "none", PIN_REASON)
class TorchaoQuantLiftUpTests(TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        try:
            installed = metadata.version("torchao")
        except metadata.PackageNotFoundError:
            installed = "none"
        if installed != PIN:
            raise RuntimeError(f"torchao {installed} is installed, test/torchao.tsv pins "
                               f"{PIN} for torch {torch.__version__}: rerun scripts/venv.sh")
        # The import sets the pass process-wide; keep it here, out of the
        # config, so the other suites of the same pytest run do not get it.
        before = inductor_config.pre_grad_custom_pass
        try:
            cls.quantizer_module = importlib.import_module(QUANTIZER)
            cls.lift_up = inductor_config.pre_grad_custom_pass
        finally:
            inductor_config.pre_grad_custom_pass = before
        from torchao.quantization.pt2e import move_exported_model_to_eval
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        xiq = cls.quantizer_module
        torch.manual_seed(0)
        cls.x = torch.randn(2, 3, 8, 8)
        with torch.no_grad():
            exported = torch.export.export(ConvBnReluLinear().eval(), (cls.x,),
                                           strict=True).module()
            quantizer = xiq.X86InductorQuantizer().set_global(
                xiq.get_default_x86_inductor_quantization_config())
            prepared = prepare_pt2e(exported, quantizer)
            prepared(cls.x)  # calibration
            move_exported_model_to_eval(prepared)
            cls.quantized = convert_pt2e(prepared)
            cls.eager = cls.quantized(cls.x)

    def setUp(self) -> None:
        super().setUp()
        torch._dynamo.reset()
        counters.clear()

    @contextmanager
    def counting_lift_up(self, **config: Any) -> Iterator[list[int]]:
        """The config with torchao's pass; yields a one-element list holding
        how often the pass ran. The class's __call__ is wrapped, so the object
        (and the uuid the cache key takes from it) is torchao's own."""
        lift_up = self.lift_up
        real = type(lift_up).__call__
        calls = [0]

        def counting(pass_self: Any, graph: torch.fx.Graph) -> None:
            calls[0] += 1
            return real(pass_self, graph)

        uuid = lift_up.uuid()
        with (
            inductor_config.patch({"pre_grad_custom_pass": lift_up, **config}),
            unittest.mock.patch.object(type(lift_up), "__call__", counting),
            torch.no_grad(),
        ):
            self.assertEqual(lift_up.uuid(), uuid)
            yield calls

    def compile_and_run(self, model: torch.nn.Module) -> torch.Tensor:
        torch._dynamo.reset()
        return torch.compile(model)(self.x)

    def test_quantizer_sets_quant_lift_up_with_a_uuid(self) -> None:
        """The import sets a QuantLiftUp, a CustomGraphPass whose uuid() is the
        hash of torchao's x86 passes file."""
        from torchao.quantization.pt2e.inductor_passes import x86

        self.assertIs(type(self.lift_up), x86.QuantLiftUp)
        self.assertIs(self.lift_up, x86.quant_lift_up)
        self.assertIsInstance(self.lift_up, CustomGraphPass)
        self.assertEqual(self.lift_up.uuid(), get_hash_for_files((x86.__file__,)))

    def test_quant_lift_up_moves_the_quantize_above_the_reshape(self) -> None:
        """On this model the pass does work: the quantize of the linear's
        input moves from after the reshape to before it."""
        quantize = torch.ops.quantized_decomposed.quantize_per_tensor.default
        views = (torch.ops.aten.reshape.default, torch.ops.aten.view.default)
        graph = copy.deepcopy(self.quantized).graph

        def order() -> list[str]:
            return [("quantize" if node.target is quantize else "reshape")
                    for node in graph.nodes if node.target is quantize or node.target in views]

        self.assertEqual(order(), ["quantize", "reshape", "quantize"])
        self.lift_up(graph)
        self.assertEqual(order(), ["quantize", "quantize", "reshape"])

    def test_warm_compile_hits_without_running_quant_lift_up(self) -> None:
        """Without freezing: the warm compile is an AOTAutogradCache hit and
        runs QuantLiftUp 0 times (stock 2.10 and 2.11 run it again)."""
        model = copy.deepcopy(self.quantized)
        with self.counting_lift_up() as calls:
            self.compile_and_run(model)
            self.assertEqual((calls[0], cache_counts(bypasses=True)),
                             (1, counts(aot_miss=1, fx_miss=1)))
            counters.clear()
            self.compile_and_run(model)
            self.assertEqual((calls[0], cache_counts(bypasses=True)),
                             (1, counts(aot_hit=1, fx_hit=1)),
                             "(QuantLiftUp calls so far, warm compile's cache counters)")

    def test_compiled_results_equal_the_eager_quantized_model(self) -> None:
        """Without freezing, the cold and the warm compile return the eager
        quantized model's output."""
        model = copy.deepcopy(self.quantized)
        with self.counting_lift_up():
            cold = self.compile_and_run(model)
            warm = self.compile_and_run(model)
        torch.testing.assert_close(cold, self.eager, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(warm, self.eager, atol=ATOL, rtol=RTOL)

    def test_freezing_bypasses_both_caches_and_runs_quant_lift_up(self) -> None:
        """With freezing, the AOTAutogradCache and the FX graph cache are
        bypassed on the cold and the warm compile, and QuantLiftUp runs on
        each."""
        model = copy.deepcopy(self.quantized)
        bypass = counts(aot_bypass=1, fx_bypass=1)
        with self.counting_lift_up(freezing=True) as calls:
            self.compile_and_run(model)
            self.assertEqual((calls[0], cache_counts(bypasses=True)), (1, bypass))
            counters.clear()
            self.compile_and_run(model)
            self.assertEqual((calls[0], cache_counts(bypasses=True)), (2, bypass),
                             "(QuantLiftUp calls so far, warm compile's cache counters)")
