"""Print show_effect.py reports of several torch builds side by side.

Usage: python3 test/harness/effect_table.py LABEL=REPORT.json [LABEL=REPORT.json ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def cache_cell(counts: dict[str, Any], prefix: str) -> str:
    parts = [
        f"{counts[f'{prefix}_{kind}']} {kind}"
        for kind in ("hit", "miss", "bypass")
        if counts[f"{prefix}_{kind}"]
    ]
    return ", ".join(parts) or "-"


def print_table(columns: list[tuple[str, dict[str, Any]]]) -> None:
    cell = ["pre-grad", "AOT cache", "FX cache", "= eager"]
    widths = [8, 9, 8, 11]
    head = f"{'':<29}{'':<6}" + "".join(
        f"| {label:<{sum(widths) + 2 * len(widths) - 2}} " for label, _ in columns
    )
    sub = f"{'scenario':<29}{'':<6}" + "".join(
        "| " + "  ".join(f"{c:<{w}}" for c, w in zip(cell, widths)) + " "
        for _ in columns
    )
    print(head.rstrip())
    print(sub.rstrip())
    print("-" * len(sub.rstrip()))
    scenarios: list[str] = []
    for _, report in columns:
        scenarios += [name for name in report["scenarios"] if name not in scenarios]
    for scenario in scenarios:
        for phase in ("cold", "warm"):
            row = f"{scenario if phase == 'cold' else '':<29}{phase:<6}"
            for _, report in columns:
                if scenario not in report["scenarios"]:  # torchvision missing there
                    values = ["n/a", "", "", ""]
                    row += "| " + "  ".join(f"{v:<{w}}" for v, w in zip(values, widths)) + " "
                    continue
                counts = report["scenarios"][scenario][phase]
                values = [
                    str(counts["pre_grad_runs"]),
                    cache_cell(counts, "aot"),
                    cache_cell(counts, "fx"),
                    "yes" if counts["matches_eager"]
                    else f"NO ({counts.get('max_abs_error', float('nan')):.3g})",
                ]
                row += "| " + "  ".join(f"{v:<{w}}" for v, w in zip(values, widths)) + " "
            print(row.rstrip())


def main(specs: list[str]) -> int:
    if not specs or any("=" not in spec for spec in specs):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    columns = []
    for spec in specs:
        label, _, path = spec.partition("=")
        columns.append((label, json.loads(Path(path).read_text())))
    print_table(columns)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
