"""PREGRAD_TEST_DEVICE=cuda (scripts/gpu-check.sh) makes every tensor and
module the behaviour and results suites create live on that device, through
torch's default device; unset, they run on the CPU as always.

The verdict of a matrix job (test/harness/matrix.py) is pytest's own exit
status; what a build is expected to fail is said here, as strict xfails:

- PREGRAD_EXPECT_STOCK=VERSION (every stock job): a test that
  stock_expectations.expected_outcome says fails on stock torch VERSION is
  marked xfail(strict=True), so that a defect that went away upstream, or a
  test that cannot fail, passes and so fails the run (XPASS(strict)); one
  whose stock outcome proves nothing either way ("any") is a plain xfail.
- PREGRAD_EXPECT_PATCHED=VERSION (every patched job): the tests
  stock_expectations.expected_patched_outcome says fail on patched VERSION
  (a needless miss upstream's keying keeps) are strict xfails; every other
  test must pass.
- PREGRAD_STOCK_DISCRIMINATING=VERSION (full-tier stock jobs) deselects the
  tests whose stock run can tell nothing the patched run of the same release
  does not (stock_expectations.checks_something_on_stock): those expected to
  pass on both, outside 2.12 (the stock behaviour the feature is defined by)
  and the tool's own suites. Every one of them still runs on the patched
  build.

Every test starts with empty compile caches but keeps the C++ kernels earlier
tests of the process compiled (compile_caches.py); with PREGRAD_KERNEL_STORE
(the matrix's jobs) also those earlier runs of the same venv compiled
(kept_kernels.py).

A test here that is not about Inductor's CPU vector-ISA probe does not pay
for it: TORCHINDUCTOR_VEC_ISA_OK=1 (Inductor's own knob) takes the ISAs
/proc/cpuinfo lists, as the tests' child processes always have;
test_cpu_isa_probe.py runs the real probe (isa_probe.py) and checks that
the two agree.

Every test here is marked needs_torch, and those PATCHED_ONLY names
patched_only. Where torch cannot be imported (a venv made with
`pip install -e '.[test]'`), each test module is reported skipped, saying
so, and none is imported; with PREGRAD_REQUIRE_ALL=1 (the matrix's jobs)
that is an error instead."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from compile_caches import (fresh_compile_caches, make_process_cache_dir, publish_to_store,
                            seed_from_store)
from isa_probe import SKIP_ISA_PROBE

# Before torch is imported: Inductor's config reads it then.
os.environ.update(SKIP_ISA_PROBE)

try:
    import torch
except ModuleNotFoundError as no_torch:
    if os.environ.get("PREGRAD_REQUIRE_ALL") == "1":
        raise
    torch = None
    NO_TORCH = (f"test/dynamo needs torch ({no_torch}): its suites run in a torch venv "
                "(scripts/test.sh makes them; docs/testing.md)")

DEVICE = os.environ.get("PREGRAD_TEST_DEVICE", "")
if DEVICE and torch is not None:
    torch.set_default_device(DEVICE)

EXPECT_STOCK = "PREGRAD_EXPECT_STOCK"
EXPECT_PATCHED = "PREGRAD_EXPECT_PATCHED"
STOCK_DISCRIMINATING = "PREGRAD_STOCK_DISCRIMINATING"
HERE = Path(__file__).resolve().parent
# Marked patched_only (a stock job leaves them out: -m "not patched_only",
# test/harness/matrix_jobs.py), by these words of their names: the random
# properties (stacks of modules, compile sequences under autocast) prove
# nothing on stock (they may or may not draw a failing case); the two-process
# autocast test repeats on stock what the one-process tests already show there.
PATCHED_ONLY = ("random_stacks", "under_autocast", "processes_sharing_a_cache")
PROCESS_CACHE_DIR = make_process_cache_dir()
if torch is not None:
    seed_from_store(PROCESS_CACHE_DIR)


@pytest.fixture(autouse=True)
def fresh_caches_for_each_test() -> Iterator[None]:
    with fresh_compile_caches():
        yield


def pytest_unconfigure(config: pytest.Config) -> None:
    try:
        if torch is not None:
            publish_to_store(PROCESS_CACHE_DIR)
    finally:
        shutil.rmtree(PROCESS_CACHE_DIR, ignore_errors=True)


class WithoutTorch(pytest.File):
    """A test module here, where torch cannot be imported: skipped, unimported."""

    def collect(self) -> list[pytest.Item]:
        pytest.skip(NO_TORCH)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.File | None:
    if torch is None:
        return WithoutTorch.from_parent(parent, path=module_path)
    return None


def pytest_itemcollected(item: pytest.Item) -> None:
    # Before any selection (-m) looks at the item.
    if item.path.parent != HERE:
        return
    item.add_marker("needs_torch")
    if any(word in item.name for word in PATCHED_ONLY):
        item.add_marker("patched_only")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A conftest's collection hook sees every item of the session: keep to
    # the suites of this directory, the ones stock_expectations.py knows.
    ours = [item for item in items if item.path.parent == HERE]
    deselect_what_stock_cannot_tell(config, items, ours)
    mark_expected_failures(items)


def deselect_what_stock_cannot_tell(config: pytest.Config, items: list[pytest.Item],
                                    ours: list[pytest.Item]) -> None:
    version = os.environ.get(STOCK_DISCRIMINATING)
    if not version:
        return
    from stock_expectations import checks_something_on_stock

    dropped = [item for item in ours
               if not checks_something_on_stock(version, item.path.name, item.name)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in gone]


def mark_expected_failures(items: list[pytest.Item]) -> None:
    stock, patched = os.environ.get(EXPECT_STOCK), os.environ.get(EXPECT_PATCHED)
    if stock and patched:
        raise pytest.UsageError(f"{EXPECT_STOCK} and {EXPECT_PATCHED} are both set: a build "
                                "is stock or patched")
    if not (stock or patched):
        return
    from stock_expectations import expected_outcome, expected_patched_outcome

    for item in (item for item in items if item.path.parent == HERE):
        try:
            outcome = (expected_outcome(stock, item.path.name, item.name) if stock
                       else expected_patched_outcome(patched, item.path.name, item.name))
        except ValueError as unknown:  # a new test without an expectation: say so, fail
            raise pytest.UsageError(f"{item.nodeid}: {unknown} (test/dynamo/"
                                    "stock_expectations.py)") from unknown
        if outcome == "fail":
            build = f"stock torch {stock}" if stock else f"patched torch {patched}"
            item.add_marker(pytest.mark.xfail(strict=True, reason=(
                f"expected to fail on {build} (test/dynamo/stock_expectations.py); "
                "a pass here means the defect or the test changed")))
        elif outcome == "any":
            item.add_marker(pytest.mark.xfail(strict=False, reason=(
                f"its outcome on stock torch {stock} proves nothing either way "
                "(test/dynamo/stock_expectations.py)")))
