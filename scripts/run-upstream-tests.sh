#!/usr/bin/env bash
# Usage: scripts/run-upstream-tests.sh CHECKOUT --python PY [--tests LIST] [-- PYTEST_ARGS ...]
#        scripts/run-upstream-tests.sh --help
#
# Runs PyTorch's own tests for the compile caches and pre-grad passes from a
# checkout against PY's installed torch, first stock, then with the series
# applied, and prints the tests that pass stock but fail patched (regressions).
#
#   CHECKOUT     a pytorch/pytorch work tree; its test/ directory supplies the
#                test files (matching PY's torch version, e.g. tag v2.11.0).
#                It is never modified: tests run from CHECKOUT/test with
#                PYTHONDONTWRITEBYTECODE=1 and pytest's cache off, and reports
#                go to a temporary directory.
#   --python PY  the interpreter whose torch is tested; it must be a supported
#                base, pristine or patched by scripts/apply.sh. This script
#                reverts/applies the series on it as needed and leaves it as it
#                found it, even when interrupted.
#   --tests LIST the maintained list of files, relative to CHECKOUT/test
#                (default: upstream-tests.txt in this repository); files the
#                checkout lacks are listed and skipped.
#   PYTEST_ARGS  passed to both pytest runs (e.g. -k pre_grad -x).
#
# The full list takes a long time (upstream's cache tests compile hundreds of
# graphs). To narrow it, pass a shorter list with --tests; pytest's -k also
# matches file and class names (-k cache selects all of
# test_aot_autograd_cache.py), so use words only test names contain, e.g.
# -k "pre_grad and not Cache". Never writes to CHECKOUT: a file the tests
# create or change there (git work tree or not) is reported.
# The summary gives each build's passed/failed/skipped counts, then the tests
# that pass stock but fail patched (regressions) and the reverse.
# Exit codes: 0 no regressions; 1 regressions, no listed file found, or a
# step failed; 2 usage error.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
die_usage() { printf 'run-upstream-tests.sh: %s\n(see --help)\n' "$1" >&2; exit 2; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
checkout="" python="" list="$repo/upstream-tests.txt"
pytest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --python) [ $# -ge 2 ] || die_usage "--python needs an interpreter"; python="$2"; shift 2 ;;
    --tests) [ $# -ge 2 ] || die_usage "--tests needs a file"; list="$2"; shift 2 ;;
    --) shift; pytest_args=("$@"); break ;;
    -*) die_usage "unknown argument: $1" ;;
    *) [ -z "$checkout" ] || die_usage "one checkout at a time"; checkout="$1"; shift ;;
  esac
done
[ -n "$checkout" ] || die_usage "name the CHECKOUT"
[ -n "$python" ] || die_usage "name the torch to test: --python PY"
[ -d "$checkout/test" ] || { echo "run-upstream-tests.sh: $checkout has no test/ directory" >&2; exit 1; }
[ -f "$list" ] || { echo "run-upstream-tests.sh: no test list at $list" >&2; exit 1; }
checkout="$(cd "$checkout" && pwd)"

found=() missing=()
while IFS= read -r line; do
  entry="${line%%#*}"; entry="${entry//[[:space:]]/}"
  [ -n "$entry" ] || continue
  if [ -f "$checkout/test/$entry" ]; then found+=("$entry"); else missing+=("$entry"); fi
done < "$list"
for entry in "${missing[@]}"; do echo "not in this checkout, skipped: test/$entry" >&2; done
if [ ${#found[@]} -eq 0 ]; then
  echo "run-upstream-tests.sh: no listed test file exists under $checkout/test (a checkout at the wrong tag?): nothing was compared" >&2
  exit 1
fi

# Before anything changes the install: the runner must be able to run.
if ! "$python" -m pytest --version >/dev/null 2>&1; then
  echo "run-upstream-tests.sh: $python cannot run pytest (install it there: $python -m pip install pytest expecttest hypothesis); nothing was changed" >&2
  exit 1
fi

# The stock/patched switch is the default topic's; opt-in topics stay as they are.
source "$here/common.sh"
default_topic="$(pregrad_primary_topic)"
state_of() { "$here/apply.sh" --python "$python" --status --topic "$default_topic" | tail -n 1 | cut -d: -f1; }
initial="$(state_of)" || true
case "$initial" in
  pristine|patched) ;;
  *) "$here/apply.sh" --python "$python" --status --topic "$default_topic" >&2 || true
     echo "run-upstream-tests.sh: $python's torch is '$initial'; need pristine or patched" >&2
     exit 1 ;;
esac

reports="$(mktemp -d)"
restore() {
  local now
  now="$(state_of)" || true
  if [ "$now" != "$initial" ]; then
    if [ "$initial" = pristine ]; then "$here/apply.sh" --python "$python" --revert --topic "$default_topic" >&2
    else "$here/apply.sh" --python "$python" --topic "$default_topic" >&2; fi
  fi
  rm -rf "$reports"
}
trap restore EXIT
trap 'exit 130' INT TERM

# What the tests could leave in the checkout, for any tree, git or not: every
# file's path, size and modification time.
tree_state() { (cd "$checkout" && find . -path ./.git -prune -o -type f -printf '%p %s %T@\n' | sort); }
before="$(tree_state)"
run_tests() {  # run_tests LABEL
  echo "== $1: ${#found[@]} file(s) from $checkout/test" >&2
  (cd "$checkout/test" && PYTHONDONTWRITEBYTECODE=1 PYTORCH_PRINT_REPRO_ON_FAILURE=0 \
     "$python" -m pytest -p no:cacheprovider -q --junitxml="$reports/$1.xml" \
     "${found[@]}" ${pytest_args[@]+"${pytest_args[@]}"}) >&2 || true
  [ -f "$reports/$1.xml" ] || { echo "run-upstream-tests.sh: pytest wrote no report for $1" >&2; exit 1; }
}

[ "$initial" = pristine ] || "$here/apply.sh" --python "$python" --revert --topic "$default_topic" >&2
run_tests stock
"$here/apply.sh" --python "$python" --topic "$default_topic" >&2
run_tests patched

after="$(tree_state)"
if [ "$before" != "$after" ]; then
  echo "warning: the test run changed files in $checkout (before/after):" >&2
  diff <(echo "$before") <(echo "$after") >&2 || true
fi

python3 "$here/../test/harness/junit_summary.py" --compare "$reports/stock.xml" "$reports/patched.xml"
