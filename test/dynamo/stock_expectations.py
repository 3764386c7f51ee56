"""Which tests must fail on a stock (unpatched) torch, and why.

scripts/test.sh runs every suite on each stock release and on each patched
one. On a patched build every test must pass. On a stock build a test must
fail exactly when the defect or missing feature it checks is there, or it
tests nothing; `expected_outcome` says which, from the release and the test's
name alone. "any" marks a test whose stock outcome proves nothing either way
(the hypothesis property may or may not draw a failing cell).
"""

from __future__ import annotations

import re

FEATURE_SINCE = (2, 12)  # pre_grad_pass_timing is upstream from 2.12.0
CONV_BN_MODELS = {"conv_bn", "two_conv_bn_identity"}
RESULTS_CELL = re.compile(
    r"test_matches_eager_timing_(?P<timing>\w+?)_(?P<freezing>freezing|nofreezing)"
    r"_entry_(?P<entry>compile_fx|torch_compile)_model_name_(?P<model>\w+)$"
)


def release(version: str) -> tuple[int, int]:
    """'2.12.0+cu130' -> (2, 12)."""
    major, minor = version.split("+", 1)[0].split(".")[:2]
    return int(major), int(minor)


def expected_outcome(version: str, test_file: str, test_name: str) -> str:
    """"pass", "fail" or "any" for a test of `test_file` on stock torch `version`."""
    has_feature = release(version) >= FEATURE_SINCE
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
