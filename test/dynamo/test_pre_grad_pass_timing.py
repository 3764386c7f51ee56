"""Cache-aware pre-grad pass timing, checked through the real torch.compile.

Every test compiles on the CPU with the real on-disk FX graph and
AOTAutograd caches (empty at the start of each test: conftest.py,
compile_caches.py) and asserts cache hits, misses and pre-grad pass invocations
exactly. They pass on torch 2.12.0 as released and on 2.11.0 with this
project's series applied; on stock 2.11.0 every one of them fails.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import torch
from hypothesis import given, settings, strategies as st
from torch._dynamo.utils import counters
from torch._inductor import config as inductor_config
from torch._inductor.test_case import TestCase
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
)

from compile_child import run_scenarios
from pregrad_passes import (
    cache_counts,
    child_environment,
    count_run_pre_grad_passes,
    CountingPass,
    plain_callable_pass,
    ScaleOutputPass,
    SinToCosPass,
)

HERE = Path(__file__).resolve().parent


def late_without_uuid(custom_pass: object) -> str:
    """The RuntimeError of explicit "late" with a pass that has no uuid, worded
    as the release under test words it: 2.12.0 (and this backport) name no
    pass, 2.13 names it (pytorch#182331)."""
    release = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    name = getattr(custom_pass, "__qualname__", None) or type(custom_pass).__qualname__
    named = f" {name}" if release >= (2, 13) else ""
    return (
        f"pre_grad_custom_pass{named} must implement uuid() to run late (after cache "
        "lookup). Either implement uuid() or set pre_grad_pass_timing to 'early'."
    )


COLD_MISS = {"aot_hit": 0, "aot_miss": 1, "fx_hit": 0, "fx_miss": 1}
WARM_HIT = {"aot_hit": 1, "aot_miss": 1, "fx_hit": 1, "fx_miss": 1}

# The custom passes of the decision table, by name (parametrize wants names).
CUSTOM_PASSES = {
    "no_pass": lambda: None,
    "uuid_pass": lambda: CountingPass("counting-pass-v1"),
    "uuid_none_pass": lambda: CountingPass(None),
    "plain_callable": lambda: plain_callable_pass,
}
TIMINGS = ["unset", "default", "early", "late"]


def resolve_pre_grad_pass_timing() -> str:
    # Imported here, not at module level, so that on a torch without the
    # feature each test fails on its own instead of the module failing to load.
    from torch._inductor.codecache import resolve_pre_grad_pass_timing as resolve

    return resolve()


def expected_timing(timing: str, custom: str) -> str:
    """The rule of upstream 2.12.0, written out: "late", "early" or "error"."""
    has_uuid = custom == "uuid_pass"
    if timing in ("unset", "default"):
        return "late" if custom == "no_pass" or has_uuid else "early"
    if timing == "late" and custom != "no_pass" and not has_uuid:
        return "error"
    return timing


def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * 2 + y


def timing_patch(timing: str) -> dict[str, str]:
    return {} if timing == "unset" else {"pre_grad_pass_timing": timing}


class PreGradPassTimingTests(TestCase):
    def setUp(self) -> None:
        super().setUp()
        torch._dynamo.reset()
        counters.clear()
        plain_callable_pass.calls = 0  # type: ignore[attr-defined]
        # The once-per-pass-class warning remembers classes process-wide.
        import torch._inductor.codecache as codecache

        getattr(codecache, "_warned_pre_grad_pass_missing_uuid", set()).clear()
        self.x = torch.randn(10)
        self.y = torch.randn(10)

    def compile_and_run(self) -> torch.Tensor:
        torch._dynamo.reset()
        return torch.compile(fn)(self.x, self.y)

    def test_config_default_is_default(self) -> None:
        self.assertEqual(inductor_config.pre_grad_pass_timing, "default")
        self.assertEqual(resolve_pre_grad_pass_timing(), "late")

    @parametrize("timing", TIMINGS)
    @parametrize("custom", list(CUSTOM_PASSES))
    def test_decision_table(self, timing: str, custom: str) -> None:
        """timing x custom pass -> resolved timing, pass calls on a cold then a
        warm compile, and cache hit/miss; or the RuntimeError of explicit
        "late" with a pass that has no uuid."""
        custom_pass = CUSTOM_PASSES[custom]()
        expected = expected_timing(timing, custom)
        patches = {"pre_grad_custom_pass": custom_pass, **timing_patch(timing)}
        with inductor_config.patch(patches), count_run_pre_grad_passes() as calls:
            if expected == "error":
                with self.assertRaisesRegex(RuntimeError, "must implement uuid"):
                    resolve_pre_grad_pass_timing()
                with self.assertRaisesRegex(RuntimeError, "must implement uuid"):
                    self.compile_and_run()
                self.assertEqual(calls[0], 0)
                return

            self.assertEqual(resolve_pre_grad_pass_timing(), expected)
            result1 = self.compile_and_run()
            self.assertEqual(calls[0], 1)
            self.assertEqual(cache_counts(), COLD_MISS)

            result2 = self.compile_and_run()
            self.assertEqual(calls[0], 1 if expected == "late" else 2)
            self.assertEqual(cache_counts(), WARM_HIT)
            self.assertEqual(result1, result2)
            self.assertEqual(result2, fn(self.x, self.y))
            if custom_pass is not None:
                self.assertEqual(custom_pass.calls, calls[0])

    @given(
        timing=st.sampled_from(TIMINGS),
        custom=st.sampled_from(list(CUSTOM_PASSES)),
    )
    @settings(max_examples=64, deadline=None)
    def test_resolution_matches_rule(self, timing: str, custom: str) -> None:
        """resolve_pre_grad_pass_timing() agrees with the rule for every cell,
        in any order of calls (the warning set must not change the answer)."""
        custom_pass = CUSTOM_PASSES[custom]()
        patches = {"pre_grad_custom_pass": custom_pass, **timing_patch(timing)}
        with inductor_config.patch(patches):
            if expected_timing(timing, custom) == "error":
                with self.assertRaises(RuntimeError) as caught:
                    resolve_pre_grad_pass_timing()
                self.assertEqual(str(caught.exception), late_without_uuid(custom_pass))
            else:
                self.assertEqual(
                    resolve_pre_grad_pass_timing(), expected_timing(timing, custom)
                )

    # The three tests of the upstream change that defines the rule.

    def test_pre_grad_passes_default_timing_with_uuid(self) -> None:
        """Default timing and a custom pass with a uuid: passes run late, only
        on a cache miss."""
        with (
            inductor_config.patch("pre_grad_custom_pass", CountingPass()),
            count_run_pre_grad_passes() as calls,
        ):
            result1 = self.compile_and_run()
            self.assertEqual(counters["aot_autograd"]["autograd_cache_miss"], 1)
            self.assertEqual(counters["aot_autograd"]["autograd_cache_hit"], 0)
            self.assertEqual(calls[0], 1)

            result2 = self.compile_and_run()
            self.assertEqual(counters["aot_autograd"]["autograd_cache_miss"], 1)
            self.assertEqual(counters["aot_autograd"]["autograd_cache_hit"], 1)
            self.assertEqual(calls[0], 1)
            self.assertEqual(result1, result2)

    def test_pre_grad_passes_default_timing_without_uuid(self) -> None:
        """Default timing and a custom pass without a uuid: passes run early,
        on every compile, cache hits included; one warning per pass class."""
        with (
            inductor_config.patch("pre_grad_custom_pass", CountingPass(None)),
            count_run_pre_grad_passes() as calls,
            self.assertLogs("torch._inductor.codecache", logging.WARNING) as logs,
        ):
            result1 = self.compile_and_run()
            self.assertEqual(calls[0], 1)
            result2 = self.compile_and_run()
            self.assertEqual(calls[0], 2)
            self.assertEqual(result1, result2)
        self.assertExpectedInline(
            "\n".join(record.getMessage() for record in logs.records),
            """\
pre_grad_custom_pass CountingPass does not implement uuid(); falling back to early timing (pre-grad pass cache will be bypassed). Implement uuid() on your CustomGraphPass to enable caching.""",  # noqa: E501 (the real output)
        )

    def test_pre_grad_pass_late_timing_without_uuid_raises(self) -> None:
        """Explicit late timing with a pass that has no uuid raises."""
        custom_pass = CountingPass(None)
        with (
            inductor_config.patch(
                {"pre_grad_pass_timing": "late", "pre_grad_custom_pass": custom_pass}
            ),
            self.assertRaises(RuntimeError) as caught,
        ):
            self.compile_and_run()
        self.assertIn(late_without_uuid(custom_pass), str(caught.exception))

    # Beyond the spec.

    def test_changed_uuid_misses_and_gives_the_new_pass_result(self) -> None:
        """A pass that scales the output: a stale hit would return the old
        factor. Same uuid hits without running the pass; a new uuid misses."""
        expected = fn(self.x, self.y)
        with count_run_pre_grad_passes() as calls:
            with inductor_config.patch("pre_grad_custom_pass", ScaleOutputPass(2.0)):
                self.assertEqual(self.compile_and_run(), expected * 2)
                self.assertEqual((calls[0], cache_counts()), (1, COLD_MISS))
                self.assertEqual(self.compile_and_run(), expected * 2)
                self.assertEqual((calls[0], cache_counts()), (1, WARM_HIT))

            with inductor_config.patch("pre_grad_custom_pass", ScaleOutputPass(3.0)):
                self.assertEqual(self.compile_and_run(), expected * 3)
                self.assertEqual(calls[0], 2)
                self.assertEqual(
                    cache_counts(),
                    {"aot_hit": 1, "aot_miss": 2, "fx_hit": 1, "fx_miss": 2},
                )

    def test_uuid_less_result_changing_pass_runs_on_every_compile(self) -> None:
        """Without a uuid the pass runs before the lookup, so its effect is
        always in the result, hit or miss."""
        expected = fn(self.x, self.y)
        scale = ScaleOutputPass(2.0, with_uuid=False)
        with inductor_config.patch("pre_grad_custom_pass", scale):
            self.assertEqual(resolve_pre_grad_pass_timing(), "early")
            self.assertEqual(self.compile_and_run(), expected * 2)
            self.assertEqual(self.compile_and_run(), expected * 2)
        self.assertEqual(scale.calls, 2)
        self.assertEqual(cache_counts(), WARM_HIT)

    def test_module_with_parameters_forward_and_backward(self) -> None:
        """An nn.Module trained one step: the warm compile hits and skips the
        pre-grad passes; outputs and gradients equal eager."""
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
        )
        inputs = torch.randn(3, 8)

        def step(module: torch.nn.Module) -> tuple[torch.Tensor, list[torch.Tensor]]:
            module.zero_grad()
            out = module(inputs)
            out.sum().backward()
            return out.detach(), [p.grad.clone() for p in module.parameters()]

        eager_out, eager_grads = step(model)
        with count_run_pre_grad_passes() as calls:
            torch._dynamo.reset()
            cold_out, cold_grads = step(torch.compile(model))
            self.assertEqual(calls[0], 1)
            self.assertEqual(counters["aot_autograd"]["autograd_cache_miss"], 1)
            self.assertEqual(counters["aot_autograd"]["autograd_cache_hit"], 0)

            torch._dynamo.reset()
            warm_out, warm_grads = step(torch.compile(model))
            self.assertEqual(calls[0], 1)
            self.assertEqual(counters["aot_autograd"]["autograd_cache_miss"], 1)
            self.assertEqual(counters["aot_autograd"]["autograd_cache_hit"], 1)
        for out, grads in ((cold_out, cold_grads), (warm_out, warm_grads)):
            self.assertEqual(out, eager_out)
            self.assertEqual(grads, eager_grads)

    def test_late_passes_survive_cpu_freezing_with_an_identity_module(self) -> None:
        """CPU inference with freezing runs remove_identity among the built-in
        passes; late timing must still trace the module the passes changed,
        so the custom pass's rewrite (sin -> cos) shows in the output."""

        class Model(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.linear = torch.nn.Linear(8, 8)
                self.identity = torch.nn.Identity()

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return torch.sin(self.identity(self.linear(x)))

        model = Model().eval()
        x = torch.randn(4, 8)
        sin_to_cos = SinToCosPass()
        with (
            torch.no_grad(),
            inductor_config.patch({"freezing": True, "pre_grad_custom_pass": sin_to_cos}),
        ):
            self.assertEqual(resolve_pre_grad_pass_timing(), "late")
            torch._dynamo.reset()
            out = torch.compile(model)(x)
            self.assertEqual(sin_to_cos.calls, 1)
            self.assertEqual(out, torch.cos(model.linear(x)))

    def test_warm_start_in_a_second_process(self) -> None:
        """A new process sharing the cache directory hits without running the
        pre-grad passes; a changed uuid there misses and runs them. The first
        process is this one (its cache directory is the child's)."""
        env = child_environment(HERE)  # carries the cache dir, emptied for this test

        def run_child(*uuids: str) -> list[dict[str, int]]:
            result = subprocess.run(
                [sys.executable, str(HERE / "compile_child.py"), *uuids],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            self.assertEqual(result.returncode, 0, result.stderr[-4000:])
            return json.loads(result.stdout.splitlines()[-1])

        cold = {"pre_grad_calls": 1, **COLD_MISS}
        self.assertEqual(run_scenarios(["uuid-a"]), [cold])
        self.assertEqual(
            run_child("uuid-a", "uuid-b"),
            [{"pre_grad_calls": 0, "aot_hit": 1, "aot_miss": 0, "fx_hit": 1, "fx_miss": 0}, cold],
        )


instantiate_parametrized_tests(PreGradPassTimingTests)
