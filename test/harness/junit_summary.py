"""Read a pytest --junitxml report for scripts/test.sh and run-upstream-tests.sh.

Usage: python3 test/harness/junit_summary.py REPORT.xml --by-suite [--expect-stock VERSION]
       python3 test/harness/junit_summary.py REPORT.xml --by-suite --expect-patched VERSION
       python3 test/harness/junit_summary.py --compare STOCK.xml PATCHED.xml

--by-suite prints one "file|N passed, N failed, N expected-fail|verdict" line
per test file of the report. Without --expect-stock every test must pass;
with it, each test must have the outcome that test/dynamo/stock_expectations.py
gives for stock torch VERSION: a test that passes where the defect it checks
is present, or fails where it is not, is listed and the exit status is 1.
With --expect-patched, every test must pass except where
stock_expectations.expected_patched_outcome says otherwise for patched torch
VERSION. Errors count as failures.

--compare prints each build's counts, then the tests that pass on stock torch
but fail on patched torch (regressions; exit 1 if any) and those fixed the
other way.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "dynamo"))


def by_test(report: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for case in ElementTree.parse(report).iter("testcase"):
        kinds = {child.tag for child in case}
        outcome = ("failed" if kinds & {"failure", "error"}
                   else "skipped" if "skipped" in kinds else "passed")
        result[f"{case.get('classname')}::{case.get('name')}"] = outcome
    return result


def by_suite(report: str, version: str | None, patched: str | None = None) -> int:
    """One line per test file: "file|counts|verdict". Without `version` every
    test must pass; with it, each must do what stock_expectations.py says for
    stock torch `version`. Tests that do otherwise go to stderr; exit 1 then."""
    from stock_expectations import expected_outcome, expected_patched_outcome

    suites: dict[str, list[int]] = {}
    wrong: list[str] = []
    for test, outcome in by_test(report).items():
        classname, name = test.split("::", 1)
        if not classname:  # a file that failed to collect: name is its dotted path
            suites.setdefault(name.rsplit(".", 1)[-1] + ".py", [0, 0, 0, 0])[1] += 1
            wrong.append(f"  {outcome}: {name} did not collect (the log says why)")
            continue
        module = classname.rsplit(".", 2)[-2] + ".py"
        expected = (expected_outcome(version, module, name) if version
                    else expected_patched_outcome(patched, module, name) if patched
                    else "pass")
        counts = suites.setdefault(module, [0, 0, 0, 0])  # passed, failed, xfail, skipped
        if outcome == "skipped":
            counts[3] += 1
        elif outcome == "failed" and expected in ("fail", "any"):
            counts[2] += 1
        elif outcome == "passed" and expected in ("pass", "any"):
            counts[0] += 1
        else:
            counts[1] += 1
            where = f"on stock {version}" if version else "patched"
            wrong.append(f"  {outcome} {where}, expected {expected}: {test}")
    for module, (passed, failed, xfail, skipped) in sorted(suites.items()):
        verdict = ("ok" if not failed else "FAILED") + (
            " (fails exactly where expected)" if version and not failed else "")
        print(f"{module}|{passed} passed, {failed} failed, {xfail} expected-fail"
              + (f", {skipped} skipped" if skipped else "") + f"|{verdict}")
    for line in wrong:
        print(line, file=sys.stderr)
    return 1 if wrong or not suites else 0


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
    if len(argv) == 2 and argv[1] == "--by-suite":
        return by_suite(argv[0], None)
    if len(argv) == 4 and argv[1:3] == ["--by-suite", "--expect-stock"]:
        return by_suite(argv[0], argv[3])
    if len(argv) == 4 and argv[1:3] == ["--by-suite", "--expect-patched"]:
        return by_suite(argv[0], None, argv[3])
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
