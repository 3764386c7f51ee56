"""PREGRAD_TEST_DEVICE=cuda (scripts/gpu-check.sh) makes every tensor and
module the behaviour and results suites create live on that device, through
torch's default device; unset, they run on the CPU as always.

PREGRAD_STOCK_DISCRIMINATING=VERSION (scripts/test.sh, on full-tier stock
builds) deselects the tests whose stock run can tell nothing the patched run
of the same release does not (stock_expectations.checks_something_on_stock):
those expected to pass on both, outside 2.12 (the stock behaviour the feature
is defined by) and the tool's own suites. Every one of them still runs on the
patched build.

Every test starts with empty compile caches but keeps the C++ kernels earlier
tests of the process compiled (compile_caches.py)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
import torch

from compile_caches import fresh_compile_caches, make_process_cache_dir

DEVICE = os.environ.get("PREGRAD_TEST_DEVICE", "")
if DEVICE:
    torch.set_default_device(DEVICE)

PROCESS_CACHE_DIR = make_process_cache_dir()


@pytest.fixture(autouse=True)
def fresh_caches_for_each_test() -> Iterator[None]:
    with fresh_compile_caches():
        yield


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(PROCESS_CACHE_DIR, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    version = os.environ.get("PREGRAD_STOCK_DISCRIMINATING")
    if not version:
        return
    from stock_expectations import checks_something_on_stock

    kept, dropped = [], []
    for item in items:
        if checks_something_on_stock(version, item.path.name, item.name):
            kept.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
