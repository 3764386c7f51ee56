"""Compare two pytest --junitxml reports, for scripts/run-upstream-tests.sh:
PyTorch's own tests run on stock torch, then on patched torch.

Usage: python3 test/harness/junit_summary.py --compare STOCK.xml PATCHED.xml

Prints each build's counts (passed, failed, skipped; an error is a failure,
an expected failure is skipped), then the tests that pass on stock torch but
fail on patched torch (regressions), those fixed the other way, and those
that ran on stock only. Exit status 1 if there is a regression (the script's
own exit status), else 0; 2 for a usage error.

The project's own runs are judged by pytest's exit status instead (stock
expectations are strict xfails, test/dynamo/conftest.py), and their tables
are counted by test/harness/matrix_report.py: the matrix's and
scripts/gpu-check.sh's.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree


def by_test(report: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = ("failed" if kinds & {"failure", "error"}
                   else "skipped" if "skipped" in kinds else "passed")
        result[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return result


def compare(stock_report: str, patched_report: str) -> int:
    stock, patched = by_test(stock_report), by_test(patched_report)
    regressions = sorted(t for t in stock if stock[t] == "passed" and patched.get(t) == "failed")
    fixed = sorted(t for t in stock if stock[t] == "failed" and patched.get(t) == "passed")
    vanished = sorted(t for t in stock if t not in patched)
    width = max([len(t) for t in regressions + fixed + vanished] + [4])
    for label, results in (("stock", stock), ("patched", patched)):
        counts = {kind: sum(1 for r in results.values() if r == kind)
                  for kind in ("passed", "failed", "skipped")}
        print(f"{label}: {counts['passed']} passed, {counts['failed']} failed, "
              f"{counts['skipped']} skipped")
    for title, rows, after in (("regressions (pass stock, fail patched)", regressions, "failed"),
                               ("fixed (fail stock, pass patched)", fixed, "passed"),
                               ("ran on stock only", vanished, "-")):
        print(f"{title}: {len(rows)}")
        if rows:
            print(f"  {'test':<{width}}  stock   patched")
            for test in rows:
                print(f"  {test:<{width}}  {stock[test]:<6}  {patched.get(test, after)}")
    return 1 if regressions else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--compare"] and len(argv) == 3:
        return compare(argv[1], argv[2])
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
