"""PREGRAD_TEST_DEVICE=cuda (scripts/gpu-check.sh) makes every tensor and
module the behaviour and results suites create live on that device, through
torch's default device; unset, they run on the CPU as always.

PREGRAD_STOCK_DISCRIMINATING=VERSION (scripts/test.sh, on stock builds) runs
only the results-table cells that stock_expectations.py says fail on stock
torch VERSION: a cell that passes on stock checks nothing the stock run is
for (that the test can fail), and every cell still runs on the patched build
of the same release."""

from __future__ import annotations

import os

import pytest
import torch

DEVICE = os.environ.get("PREGRAD_TEST_DEVICE", "")
if DEVICE:
    torch.set_default_device(DEVICE)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    version = os.environ.get("PREGRAD_STOCK_DISCRIMINATING")
    if not version:
        return
    from stock_expectations import expected_outcome, RESULTS_CELL

    kept, dropped = [], []
    for item in items:
        name = item.name
        cell = item.path.name == "test_pre_grad_results.py" and RESULTS_CELL.match(name)
        if cell and expected_outcome(version, item.path.name, name) == "pass":
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
