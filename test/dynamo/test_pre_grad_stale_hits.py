"""No stale cache hits: a hypothesis state machine of compiles in one process.

One process, one cache directory per run of the machine, and a sequence of
`torch.compile` calls, each under a random timing (unset / "default" /
"early" / "late") and custom pass: none, a pass with a uuid, one whose uuid()
is None, or a plain function, each scaling the output by a random factor
(the uuid names the factor and a tag, so the pass's behaviour is covered by
its uuid, as the contract requires). Every result is checked against eager
and every AOTAutogradCache hit or miss and pre-grad pass call against a model
of what the cache key covers:

- late timing: the key is the graph before the passes plus the pass's uuid,
  and a hit runs no pre-grad pass;
- early timing: the passes run first and the key is the graph they produce,
  so it covers the factor whatever the pass is; the passes run on every
  compile;
- explicit "late" with a pass that has no uuid raises before compiling.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

import torch
from hypothesis import note, settings, strategies as st
from hypothesis.stateful import initialize, invariant, rule, RuleBasedStateMachine
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config

from compile_caches import fresh_compile_caches
from pregrad_passes import count_run_pre_grad_passes, ScaleOutputPass
from stock_expectations import AMBIENT_DTYPE_KEYED_ON_EVERY_GRAPH_SINCE, release

TIMINGS = ["unset", "default", "early", "late"]
PASS_KINDS = ["none", "uuid", "uuid_none", "plain_callable"]


def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * 2 + y


class TaggedScalePass(ScaleOutputPass):
    """Scales the output; its uuid names the factor and a tag, so two uuids
    can describe the same behaviour (a miss is then expected, not a hit)."""

    def __init__(self, factor: float, tag: str) -> None:
        super().__init__(factor)
        self.tag = tag

    def uuid(self) -> Any:
        return f"scale-{self.factor}-{self.tag}"


def plain_scale(factor: float) -> Callable[[torch.fx.Graph], None]:
    scale = ScaleOutputPass(factor, with_uuid=False)

    def scale_output(graph: torch.fx.Graph) -> None:  # a bare function: no uuid
        scale(graph)

    return scale_output


def make_pass(kind: str, factor: float, tag: str) -> Optional[Any]:
    if kind == "none":
        return None
    if kind == "uuid":
        return TaggedScalePass(factor, tag)
    if kind == "uuid_none":
        return ScaleOutputPass(factor, with_uuid=False)
    return plain_scale(factor)


def resolved_timing(timing: str, kind: str) -> str:
    """Upstream 2.12.0's rule: "late", "early" or "error"."""
    keyable = kind in ("none", "uuid")
    if timing in ("unset", "default"):
        return "late" if keyable else "early"
    if timing == "late" and not keyable:
        return "error"
    return timing


def pass_key(resolved: str, custom: Optional[Any], scale: float) -> tuple[Any, ...]:
    """What the key covers of the passes: late, the graph before them plus
    the pass's uuid; early, the graph they produce (so the factor)."""
    if resolved == "late":
        return ("late", custom.uuid() if custom is not None else None)
    return ("early", scale)


class CompileSequence(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.stack = contextlib.ExitStack()
        self.stack.enter_context(fresh_compile_caches())
        self.calls = self.stack.enter_context(count_run_pre_grad_passes())
        counters.clear()
        self.stored: set[tuple[Any, ...]] = set()  # the keys the model says are cached
        self.x = torch.randn(8)
        self.y = torch.randn(8)
        self.compiles = 0

    def teardown(self) -> None:
        if hasattr(self, "stack"):
            self.stack.close()
        torch._dynamo.reset()

    @rule(
        timing=st.sampled_from(TIMINGS),
        kind=st.sampled_from(PASS_KINDS),
        factor=st.sampled_from([2.0, 3.0]),
        tag=st.sampled_from(["a", "b"]),
    )
    def compile_and_run(self, timing: str, kind: str, factor: float, tag: str) -> None:
        custom = make_pass(kind, factor, tag)
        resolved = resolved_timing(timing, kind)
        patches: dict[str, Any] = {"pre_grad_custom_pass": custom}
        if timing != "unset":
            patches["pre_grad_pass_timing"] = timing
        calls_before = self.calls[0]
        hits_before = counters["aot_autograd"]["autograd_cache_hit"]
        misses_before = counters["aot_autograd"]["autograd_cache_miss"]
        note(f"compile {self.compiles}: timing={timing} pass={kind} factor={factor} "
             f"tag={tag} -> {resolved}")
        self.compiles += 1
        torch._dynamo.reset()
        with inductor_config.patch(patches):
            if resolved == "error":
                with self_test.assertRaisesRegex(RuntimeError, "must implement uuid"):
                    torch.compile(fn)(self.x, self.y)
                self_test.assertEqual(self.calls[0], calls_before)
                return
            result = torch.compile(fn)(self.x, self.y)
        scale = factor if kind != "none" else 1.0
        torch.testing.assert_close(result, fn(self.x, self.y) * scale)

        key = pass_key(resolved, custom, scale)
        hit = self.expect_hit_or_miss(key, hits_before, misses_before)
        expected_calls = 0 if resolved == "late" and hit else 1
        self_test.assertEqual(self.calls[0] - calls_before, expected_calls,
                              f"pre-grad pass calls for key {key}, hit={hit}")

    def expect_hit_or_miss(self, key: tuple[Any, ...], hits_before: int,
                           misses_before: int) -> bool:
        """Checks this compile's AOTAutogradCache hit or miss against the
        keys stored so far; returns whether it was a hit."""
        hit = key in self.stored
        self.stored.add(key)
        self_test.assertEqual(
            (counters["aot_autograd"]["autograd_cache_hit"] - hits_before,
             counters["aot_autograd"]["autograd_cache_miss"] - misses_before),
            (1, 0) if hit else (0, 1),
            f"AOTAutogradCache {'hit' if hit else 'miss'} expected for key {key}",
        )
        return hit

    @invariant()
    def counters_add_up(self) -> None:
        if hasattr(self, "stored"):
            self_test.assertLessEqual(counters["aot_autograd"]["autograd_cache_miss"],
                                      self.compiles)


def mm_in_region(m: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """An autocast region that names no dtype: it takes the ambient one."""
    with torch.autocast(device_type="cpu"):
        return (m @ n) * 2


def mm(m: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    return (m @ n) * 2


AUTOCAST_FORMS = ["none", "region", "call_site", "both"]
AMBIENT_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
KEYS_AMBIENT_ON_EVERY_GRAPH = release(torch.__version__) >= AMBIENT_DTYPE_KEYED_ON_EVERY_GRAPH_SINCE


class AutocastCompileSequence(CompileSequence):
    """The same compiles with an autocast dimension (topic autocast-cache-key):
    the ambient CPU autocast dtype (`torch.set_autocast_dtype`), an autocast
    region in the function that names no dtype (on/off) and autocast enabled
    around the call (on/off). Every result is compared with eager under the
    same settings, dtype included; the key the model expects covers the
    ambient dtype exactly when a region or the call site takes it, so a graph
    without autocast keeps its hits whatever the ambient dtype (from 2.15,
    where upstream keys it on every graph, always)."""

    @initialize()
    def start(self) -> None:
        super().start()
        self.stack.callback(torch.set_autocast_dtype, "cpu", torch.get_autocast_dtype("cpu"))
        generator = torch.Generator().manual_seed(0)
        self.m = torch.randn(8, 8, generator=generator)
        self.n = torch.randn(8, 8, generator=generator)

    # Only this machine's own rule: its keys are what it is about.
    compile_and_run = None  # type: ignore[assignment]

    @rule(
        timing=st.sampled_from(["unset", "early", "late"]),
        kind=st.sampled_from(["none", "uuid"]),
        factor=st.just(2.0),
        form=st.sampled_from(AUTOCAST_FORMS),
        ambient=st.sampled_from(sorted(AMBIENT_DTYPES)),
    )
    def compile_with_autocast(self, timing: str, kind: str, factor: float, form: str,
                              ambient: str) -> None:
        custom = make_pass(kind, factor, "a")
        resolved = resolved_timing(timing, kind)
        patches: dict[str, Any] = {"pre_grad_custom_pass": custom}
        if timing != "unset":
            patches["pre_grad_pass_timing"] = timing
        region = form in ("region", "both")
        call_site = form in ("call_site", "both")
        function = mm_in_region if region else mm
        hits_before = counters["aot_autograd"]["autograd_cache_hit"]
        misses_before = counters["aot_autograd"]["autograd_cache_miss"]
        note(f"compile {self.compiles}: timing={timing} pass={kind} factor={factor} "
             f"autocast={form} ambient={ambient} -> {resolved}")
        self.compiles += 1
        torch._dynamo.reset()
        torch.set_autocast_dtype("cpu", AMBIENT_DTYPES[ambient])
        with inductor_config.patch(patches), torch.autocast("cpu", enabled=call_site):
            result = torch.compile(function)(self.m, self.n)
            expected = function(self.m, self.n)
        scale = factor if kind != "none" else 1.0
        torch.testing.assert_close(result, expected * scale)

        # From 2.15 upstream keys the ambient dtype of every graph (#191106),
        # and the project leaves that keying alone there.
        takes_ambient = ambient if region or call_site or KEYS_AMBIENT_ON_EVERY_GRAPH else None
        key = (*pass_key(resolved, custom, scale), region, call_site, takes_ambient)
        self.expect_hit_or_miss(key, hits_before, misses_before)


# assertions with unittest's messages inside the machine
import unittest  # noqa: E402

self_test = unittest.TestCase()
self_test.maxDiff = None


def bounded(sequences: int, steps: int) -> settings:
    """Bounded for CI: a few sequences of a few compiles (most hit the FX
    graph cache for their kernels, so a sequence takes well under a minute);
    no shrinking, a failure prints its steps."""
    return settings(max_examples=sequences, stateful_step_count=steps, deadline=None,
                    derandomize=True, database=None,
                    phases=[p for p in settings.default.phases if p.name != "shrink"])


CompileSequence.TestCase.settings = bounded(sequences=4, steps=10)
PreGradStaleHitTests = CompileSequence.TestCase
# The autocast machine's compiles are matmuls: fewer, shorter sequences.
AutocastCompileSequence.TestCase.settings = bounded(sequences=3, steps=8)


class AutocastStaleHitTests(AutocastCompileSequence.TestCase):  # type: ignore[misc,valid-type]
    def test_no_stale_hit_under_autocast(self) -> None:
        self.runTest()
