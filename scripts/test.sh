#!/usr/bin/env bash
# Usage: scripts/test.sh [PYTEST_ARGS ...]
#        scripts/test.sh --help
#
# Runs every test, on a fresh machine too: makes sure the three torch venvs
# exist under $PREGRAD_CACHE/venvs (scripts/venv.sh; the first run downloads
# about 4.6 GB per venv), applies the series to the patched one, then:
#   1. test/dynamo on stock torch 2.11.0: every test must FAIL (a test that
#      passes without the feature tests nothing);
#   2. test/dynamo on upstream torch 2.12.0: all must pass, unpatched;
#   3. test/tools (apply.sh, the series) against small installs built from
#      the stock 2.11.0 and 2.12.0 venvs;
#   4. test/dynamo on patched torch 2.11.0: all must pass.
# PYTEST_ARGS (e.g. -k decision) go to every pytest run; the stock run is
# skipped when they select tests, since "all failed" means nothing then.
# Takes about 5 minutes once the venvs exist.
# Environment: PREGRAD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pregrad-backport).
# Exit codes: 0 all as required; 1 anything else; 2 usage error.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cd "$repo"
step() { printf '\n== %s\n' "$*" >&2; }

step "venvs"
stock="$("$here/venv.sh" 2.11.0 | tail -n 1)"
upstream="$("$here/venv.sh" 2.12.0 | tail -n 1)"
patched="$("$here/venv.sh" 2.11.0 torch-2.11.0-patched | tail -n 1)"
"$here/apply.sh" --python "$patched"

export PREGRAD_STOCK_PYTHON="$stock" PREGRAD_UPSTREAM_PYTHON="$upstream"
export PYTORCH_PRINT_REPRO_ON_FAILURE=0
reports="$(mktemp -d)"
trap 'rm -rf "$reports"' EXIT
status=0
summary=()
total_passed=0 total_failed=0

run() {  # run LABEL EXPECT PYTHON PATH: pytest, then count outcomes
  local label="$1" expect="$2" python="$3" path="$4" counts code=0
  step "$label"
  "$python" -m pytest "$path" --junitxml="$reports/$label.xml" "${@:5}" || code=$?
  if [ ! -f "$reports/$label.xml" ]; then
    summary+=("$label: pytest did not run (exit $code)"); status=1; total_failed=$((total_failed + 1)); return
  fi
  if [ "$expect" = fail ]; then
    if counts="$(python3 "$here/junit_summary.py" "$reports/$label.xml" --expect-all-failed)"; then
      summary+=("$label: $counts -- every test fails without the feature, as required")
      total_passed=$((total_passed + 1))
    else
      summary+=("$label: $counts -- FAILED: tests that pass without the feature are listed above")
      status=1; total_failed=$((total_failed + 1))
    fi
    return
  fi
  counts="$(python3 "$here/junit_summary.py" "$reports/$label.xml")"
  summary+=("$label: $counts")
  read -r p _ f _ <<<"$counts"
  total_passed=$((total_passed + p)); total_failed=$((total_failed + f))
  [ "$code" -eq 0 ] || status=1
}

if [ $# -eq 0 ]; then
  run "stock-2.11.0-must-fail" fail "$stock" test/dynamo -q --tb=line
fi
run "upstream-2.12.0" pass "$upstream" test/dynamo -q "$@"
run "tools" pass "$patched" test/tools -q "$@"
run "patched-2.11.0" pass "$patched" test/dynamo -q "$@"

step "summary"
printf '  %s\n' "${summary[@]}"
# The stock run counts as one passed check when every test failed there.
echo "summary: $total_passed passed, $total_failed failed"
exit "$status"
