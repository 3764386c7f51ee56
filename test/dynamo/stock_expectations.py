"""Which tests must fail on a stock (unpatched) torch, and why.

scripts/test.sh runs every suite on each stock release and on each patched
one. On a patched build every test must pass. On a stock build a test must
fail exactly when the defect or missing feature it checks is there, or it
tests nothing; `expected_outcome` says which, from the release and the test's
name alone. "any" marks a test whose stock outcome proves nothing either way
(the hypothesis property may or may not draw a failing cell).
test/dynamo/conftest.py makes each expected failure a strict xfail in the
jobs that name their build (PREGRAD_EXPECT_STOCK, PREGRAD_EXPECT_PATCHED),
so pytest's exit status is the verdict.
"""

from __future__ import annotations

import re

FEATURE_SINCE = (2, 12)  # pre_grad_pass_timing is upstream from 2.12.0
CONV_BN_MODELS = {"conv_bn", "two_conv_bn_identity"}
# The CPU vector-ISA probe (opt-in topic cpu-isa-probe): the release that
# brought each behaviour test_cpu_isa_probe.py checks.
ISA_PROBE_SINCE = {
    "no_import": (2, 13),  # the Linux probe child skips `import torch`, pytorch#183515
    "fallback": (2, 14),  # ... and imports it after a failed cold dlopen, #189900
    "load_ok_marker": (2, 14),  # a later process starts no probe child, #190561
}
ISA_PROBE_TESTS = {  # test -> the behaviour it needs; None: every release has it
    "test_probe_answer_matches_the_pre_2_13_probe": None,
    "test_cpuinfo_knob_gives_the_probe_answer": None,
    "test_compiled_kernel_uses_the_picked_isa_width": None,
    "test_probe_child_does_not_import_torch": "no_import",
    "test_cold_dlopen_failure_falls_back_to_import_torch": "fallback",
    "test_second_process_starts_no_probe_child": "load_ok_marker",
}
# Autocast and the AOTAutogradCache (topic autocast-cache-key): what each
# stock release does with a graph traced under one autocast dtype.
AMBIENT_DTYPE_KEYED_SINCE = (2, 13)  # enabled devices' dtype in the key, pytorch#181564
AUTOCAST_BYPASS = {(2, 12), (2, 13)}  # _enter/_exit_autocast not cacheable (#192555 in 2.14)
# From 2.15 upstream keys every device's autocast flag and dtype on every graph
# (_record_runtime_state, #191106): no stale hit, but a graph without a region
# misses under another ambient dtype. The project has no series there (the
# topic reports "has the feature"), so patched 2.15 misses the same way.
AMBIENT_DTYPE_KEYED_ON_EVERY_GRAPH_SINCE = (2, 15)
# test -> the stock releases it passes on, as a rule of the facts above; the
# dtype an in-graph region without a dtype resolves is keyed by no release
# before 2.15, which keys it on every graph.
AUTOCAST_TESTS = {
    # A bypass recompiles, so the result is right where the region is not cached.
    "test_region_without_dtype_follows_the_ambient_dtype_on_a_warm_cache":
        lambda rel: rel in AUTOCAST_BYPASS or rel >= AMBIENT_DTYPE_KEYED_ON_EVERY_GRAPH_SINCE,
    "test_region_without_dtype_misses_under_another_ambient_dtype":
        lambda rel: rel >= AMBIENT_DTYPE_KEYED_ON_EVERY_GRAPH_SINCE,
    "test_region_without_dtype_hits_under_the_same_ambient_dtype":
        lambda rel: rel not in AUTOCAST_BYPASS,
    "test_call_site_region_follows_its_dtype_on_a_warm_cache":
        lambda rel: rel >= AMBIENT_DTYPE_KEYED_SINCE,
    "test_call_site_region_misses_under_another_dtype":
        lambda rel: rel >= AMBIENT_DTYPE_KEYED_SINCE,
    "test_autocast_free_graph_keeps_its_hit_under_another_ambient_dtype":
        lambda rel: rel < AMBIENT_DTYPE_KEYED_ON_EVERY_GRAPH_SINCE,
    "test_module_with_an_autocast_disabled_region_hits_on_a_warm_compile":
        lambda rel: rel not in AUTOCAST_BYPASS,
}
# Run on patched builds only (scripts/test.sh): what stock does across two
# processes, the one-process tests above already show.
AUTOCAST_PATCHED_ONLY = {"test_processes_sharing_a_cache_get_their_own_autocast_dtype"}
# Autocast on CUDA (test_cuda_autocast_cache.py; run by scripts/gpu-check.sh
# only, it skips without a CUDA device): test -> the stock releases it passes
# on. The call-site region is the ambient CUDA dtype, which #181564 keys
# (every enabled device's dtype) from 2.13, as on the CPU; the warm hit that
# runs no pre-grad pass is the feature's, from 2.12. Not yet seen on a GPU.
CUDA_AUTOCAST_TESTS = {
    "test_bfloat16_compile_after_float16_gets_bfloat16":
        lambda rel: rel >= AMBIENT_DTYPE_KEYED_SINCE,
    "test_warm_compile_hits_and_runs_no_pre_grad_pass": lambda rel: rel >= FEATURE_SINCE,
}
# torchao's x86 PT2E flow (test_torchao_quant_lift_up.py): test -> the stock
# releases it passes on. QuantLiftUp has a uuid, so with the feature a warm
# AOTAutogradCache hit skips it; before 2.12 every pass runs on every compile.
# Releases whose test/torchao.tsv pin is "none" (2.9) skip the whole file.
TORCHAO_TESTS = {
    "test_quantizer_sets_quant_lift_up_with_a_uuid": lambda rel: True,
    "test_quant_lift_up_moves_the_quantize_above_the_reshape": lambda rel: True,
    "test_warm_compile_hits_without_running_quant_lift_up": lambda rel: rel >= FEATURE_SINCE,
    "test_compiled_results_equal_the_eager_quantized_model": lambda rel: True,
    # Freezing bypasses both caches on every release, so the pass runs each time.
    "test_freezing_bypasses_both_caches_and_runs_quant_lift_up": lambda rel: True,
}
# Real networks (test_real_models.py): torchvision models compiled with
# freezing. compile_fx on a module graph under default timing resolves late
# from 2.12 and gets the swapped conv; "early" needs the option (2.12 on).
REAL_MODEL_CELL = re.compile(
    r"test_real_model_with_freezing_matches_eager_path_(?P<path>\w+?)_model_name_(?P<model>\w+)$"
)
RESULTS_CELL = re.compile(
    r"test_matches_eager_timing_(?P<timing>\w+?)_(?P<freezing>freezing|nofreezing)"
    r"_entry_(?P<entry>compile_fx|torch_compile)_model_name_(?P<model>\w+)$"
)


# apply.sh --verify (test_verify_command.py): cell -> the stock releases it
# holds on, by the same facts as the suites that check each behaviour.
VERIFY_CELLS = {
    "conv_bn_compile_fx": lambda rel: rel < FEATURE_SINCE,  # late passes from 2.12
    "conv_bn_inductor_compile": lambda rel: rel < FEATURE_SINCE,
    "shared_conv": lambda rel: False,  # folded into a conv with another use: every release
    "warm_hit": lambda rel: rel >= FEATURE_SINCE,
    "autocast_region":
        AUTOCAST_TESTS["test_region_without_dtype_follows_the_ambient_dtype_on_a_warm_cache"],
    "autocast_call_site": AUTOCAST_TESTS["test_call_site_region_follows_its_dtype_on_a_warm_cache"],
}
VERIFY_TESTS = {  # test -> the stock releases it passes on
    "test_verify_exits_zero_and_every_cell_holds": lambda rel: False,
    # Patched 2.11.0's run, which the README shows; it skips elsewhere.
    "test_the_readme_shows_what_it_prints": lambda rel: True,
    "test_verify_names_exactly_the_cells_this_build_gets_wrong": lambda rel: True,
    "test_verify_writes_nothing_into_site_packages": lambda rel: True,
    "test_verify_removes_its_inductor_cache": lambda rel: True,
    "test_without_a_cpp_compiler_it_names_what_to_install": lambda rel: True,
    "test_another_torch_first_on_sys_path_is_named": lambda rel: True,
    "test_a_torch_that_does_not_import_is_named": lambda rel: True,
    # A Conv1d -> BatchNorm1d model through compile_fx: the late fold, from 2.12.
    "test_users_conv_bn_model_is_right_through_every_entry_point":
        lambda rel: rel < FEATURE_SINCE,
    "test_users_model_rows_name_exactly_what_this_build_gets_wrong": lambda rel: True,
    "test_an_entry_point_the_model_cannot_go_through_is_not_a_failure": lambda rel: True,
    "test_a_factory_that_is_not_there_is_named": lambda rel: True,
}


def verify_model_rows_wrong_on_stock(version: str) -> list[str]:
    """The --verify --model entry points a Conv -> BatchNorm model gets wrong
    on stock torch `version`: the two that take a module graph, from 2.12."""
    if release(version) < FEATURE_SINCE:
        return []
    return ["compile_fx(torch.fx.symbolic_trace(m))",
            "torch._inductor.compile(torch.fx.symbolic_trace(m))"]


def verify_cells_failing_on_stock(version: str) -> set[str]:
    """The --verify cells that do not hold on stock torch `version`."""
    return {cell for cell, holds in VERIFY_CELLS.items() if not holds(release(version))}


def release(version: str) -> tuple[int, int]:
    """'2.12.0+cu130' -> (2, 12)."""
    major, minor = version.split("+", 1)[0].split(".")[:2]
    return int(major), int(minor)


def isa_probe_outcome(rel: tuple[int, int], test_name: str) -> str:
    """"pass" or "fail" for a test of test_cpu_isa_probe.py on stock release `rel`."""
    if test_name not in ISA_PROBE_TESTS:
        raise ValueError(f"no stock expectations for test_cpu_isa_probe.py::{test_name}")
    behaviour = ISA_PROBE_TESTS[test_name]
    if behaviour is None:
        return "pass"
    if behaviour == "fallback":
        # Before 2.13 the child always imports torch, so a cold dlopen that
        # needs the import cannot fail the probe; 2.13 alone has no retry.
        in_gap = ISA_PROBE_SINCE["no_import"] <= rel < ISA_PROBE_SINCE["fallback"]
        return "fail" if in_gap else "pass"
    return "pass" if rel >= ISA_PROBE_SINCE[behaviour] else "fail"


def expected_outcome(version: str, test_file: str, test_name: str) -> str:
    """"pass", "fail" or "any" for a test of `test_file` on stock torch `version`."""
    if test_file == "test_cpu_isa_probe.py":
        return isa_probe_outcome(release(version), test_name)
    if test_file == "test_autocast_cache.py":
        if test_name in AUTOCAST_PATCHED_ONLY:
            return "any"
        if test_name not in AUTOCAST_TESTS:
            raise ValueError(f"no stock expectations for test_autocast_cache.py::{test_name}")
        return "pass" if AUTOCAST_TESTS[test_name](release(version)) else "fail"
    if test_file == "test_cuda_autocast_cache.py":
        if test_name not in CUDA_AUTOCAST_TESTS:
            raise ValueError(f"no stock expectations for test_cuda_autocast_cache.py::{test_name}")
        return "pass" if CUDA_AUTOCAST_TESTS[test_name](release(version)) else "fail"
    if test_file == "test_verify_command.py":
        if test_name not in VERIFY_TESTS:
            raise ValueError(f"no stock expectations for test_verify_command.py::{test_name}")
        return "pass" if VERIFY_TESTS[test_name](release(version)) else "fail"
    if test_file == "test_real_models_aoti.py":
        return "pass"  # export lifts the parameters: right on every release
    if test_file == "test_release_identification.py":
        return "pass"  # the tool's choice of series, on stock and patched alike
    if test_file == "test_real_install_round_trip.py":
        return "pass"  # apply / --status / --revert of a copy of the stock install
    if test_file == "test_patched_wheel_rules.py":
        return "pass"  # --wheel on a small wheel of the stock files: the tool's rules
    if test_file == "test_torchao_quant_lift_up.py":
        if test_name not in TORCHAO_TESTS:
            raise ValueError("no stock expectations for "
                             f"test_torchao_quant_lift_up.py::{test_name}")
        return "pass" if TORCHAO_TESTS[test_name](release(version)) else "fail"
    has_feature = release(version) >= FEATURE_SINCE
    if test_file == "test_real_models.py":
        real = REAL_MODEL_CELL.match(test_name)
        if real is None:
            raise ValueError(f"no stock expectations for test_real_models.py::{test_name}")
        if real["path"] in ("compile_fx", "inductor_compile"):
            return "fail" if has_feature else "pass"
        if real["path"] == "compile_fx_early":
            return "pass" if has_feature else "fail"  # the config option does not exist
        return "pass"
    if test_name == "test_no_stale_hit_under_autocast":
        return "any"  # a random sequence may or may not draw a stale case; not run on stock
    if test_file in ("test_pre_grad_pass_timing.py", "test_pre_grad_stale_hits.py",
                     "test_pre_grad_remote_cache.py"):
        return "pass" if has_feature else "fail"
    if test_file != "test_pre_grad_results.py":
        raise ValueError(f"no stock expectations for {test_file}")
    if test_name == "test_late_custom_pass_that_swaps_a_submodule":
        # Before 2.12 every pass runs early, so the swap is traced; from 2.12
        # the late pass swaps the module after its weights were captured.
        return "fail" if has_feature else "pass"
    cell = RESULTS_CELL.match(test_name)
    if cell is None:
        return "any"
    if not has_feature and cell["timing"] != "unset":
        return "fail"  # the config option does not exist
    if cell["freezing"] == "nofreezing" or cell["entry"] != "compile_fx":
        return "pass"  # fuse_conv_bn runs under freezing on module graphs only
    if cell["model"] == "shared_conv":
        return "fail"  # a conv with another use gets the BN folded in: every release
    if has_feature and cell["model"] in CONV_BN_MODELS and cell["timing"] != "early":
        return "fail"  # late passes swap the conv after its weights were captured
    return "pass"


# Suites about the tool, not torch: their stock run is its own check
# (--verify's, that it names a stock build's defects).
TOOL_SUITES = {"test_release_identification.py", "test_patched_wheel_rules.py",
               "test_real_install_round_trip.py", "test_verify_command.py"}
# The release whose stock behaviour defines the feature (upstream 2.12.0).
FEATURE_REFERENCE = (2, 12)


def checks_something_on_stock(version: str, test_file: str, test_name: str) -> bool:
    """Whether a stock run of the test can tell anything the patched run of
    the same release does not (scripts/test.sh deselects the others on
    full-tier stock builds, conftest.py): a test whose stock outcome differs
    from its patched one (it shows the defect or the missing feature), every
    test on 2.12 (the stock behaviour the feature is defined by), the
    real-network compile_fx cells (stock beside patched on every release) and
    the tool's own suites. A test expected to pass on both runs on the patched
    build only: there it must pass too, on the same torch plus the series.
    Before 2.13 the probe tests that compare the probe with itself are not
    run on stock either (the probe is the reference probe there)."""
    if test_file in TOOL_SUITES:
        return True
    if test_file == "test_real_models.py" and (
            REAL_MODEL_CELL.match(test_name)["path"] in ("compile_fx", "inductor_compile")):
        return True  # what users ask about: stock beside patched on every release
    rel = release(version)
    if test_file == "test_cpu_isa_probe.py":
        return isa_probe_outcome(rel, test_name) == "fail"
    stock = expected_outcome(version, test_file, test_name)
    if rel == FEATURE_REFERENCE and not RESULTS_CELL.match(test_name):
        return True
    return stock != expected_patched_outcome(version, test_file, test_name)


def expected_patched_outcome(version: str, test_file: str, test_name: str) -> str:
    """"pass" or "fail" for a test on a patched torch `version`: every test
    passes, except where a release has a topic's change upstream in a shape
    the test asks more of than correctness (a needless miss, no wrong result)."""
    if (test_file == "test_autocast_cache.py"
            and test_name == "test_autocast_free_graph_keeps_its_hit_under_another_ambient_dtype"
            and release(version) >= AMBIENT_DTYPE_KEYED_ON_EVERY_GRAPH_SINCE):
        return "fail"
    return "pass"
