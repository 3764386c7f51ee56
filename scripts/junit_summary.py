"""Count the outcomes in a pytest --junitxml report.

Usage: python3 scripts/junit_summary.py REPORT.xml [--expect-all-failed]

Prints "N passed, N failed, N skipped" (errors count as failed). With
--expect-all-failed it exits 1 unless at least one test ran and none passed
or was skipped: the torch-behaviour tests must each fail on a torch that lacks
the feature, or they test nothing.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree


def outcomes(report: str) -> tuple[int, int, int, list[str]]:
    passed = failed = skipped = 0
    passing: list[str] = []
    for case in ElementTree.parse(report).iter("testcase"):
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            failed += 1
        elif "skipped" in kinds:
            skipped += 1
        else:
            passed += 1
            passing.append(f"{case.get('classname')}.{case.get('name')}")
    return passed, failed, skipped, passing


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    passed, failed, skipped, passing = outcomes(argv[0])
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    if "--expect-all-failed" in argv[1:]:
        if failed == 0 or passed or skipped:
            for name in passing:
                print(f"  passes without the feature: {name}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
