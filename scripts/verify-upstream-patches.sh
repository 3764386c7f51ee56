#!/usr/bin/env bash
# Usage: scripts/verify-upstream-patches.sh --stock PY --patched PY [--only 0001,0002]
#        scripts/verify-upstream-patches.sh --help
#
# Checks the upstream-ready fixes in patches/upstream/ the way a reviewer
# would: each patch's own test must fail on stock torch and pass on torch with
# the fix. The test files are taken out of the patches (they add new files
# under test/inductor/) into a scratch directory; nothing is written to the
# repository or to either install.
#
#   --stock PY     a Python whose torch is stock 2.14.1 (the patches' base)
#   --patched PY   a Python whose torch 2.14.1 has patches/v2.14.1 applied
#                  (scripts/apply.sh --python PY); its code changes are the
#                  same as the upstream patches'
#   --only LIST    the patches (by number) whose tests run; default: all.
#                  On 2.15.0 (same files as 2.14.1 for 0001 and 0002) run
#                  --only 0001,0002: upstream has 0003's fix there in
#                  another shape (see patches/upstream/README.md)
#
# Prints one line per test file and build, full output in a log file.
# Exit codes: 0 every test file fails on stock and passes patched; 1 anything
# else; 2 usage error.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
stock="" patched="" only=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --stock) [ $# -ge 2 ] || { echo "verify-upstream-patches.sh: --stock needs a python" >&2; exit 2; }
             stock="$2"; shift 2 ;;
    --patched) [ $# -ge 2 ] || { echo "verify-upstream-patches.sh: --patched needs a python" >&2; exit 2; }
               patched="$2"; shift 2 ;;
    --only) [ $# -ge 2 ] || { echo "verify-upstream-patches.sh: --only needs a list, e.g. 0001,0002" >&2; exit 2; }
            only="$2"; shift 2 ;;
    *) echo "verify-upstream-patches.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$stock" ] && [ -n "$patched" ] || { usage >&2; exit 2; }

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
git -C "$scratch" init -q
patches=()
for patch in "$repo"/patches/upstream/[0-9]*.patch; do
  number="$(basename "$patch" | cut -c1-4)"
  [ -z "$only" ] || case ",$only," in *",$number,"*) ;; *) continue ;; esac
  patches+=("$patch")
done
[ ${#patches[@]} -gt 0 ] || { echo "verify-upstream-patches.sh: --only $only names no patch of patches/upstream" >&2; exit 2; }
# Only the new test files: the torch/ parts need the 2.14.1 sources.
(cd "$scratch" && git apply --include='test/*' "${patches[@]}")
mapfile -t tests < <(cd "$scratch" && find test -name 'test_*.py' | sort)
[ ${#tests[@]} -gt 0 ] || { echo "verify-upstream-patches.sh: no test files in patches/upstream" >&2; exit 1; }

status=0
for test in "${tests[@]}"; do
  for build in stock patched; do
    python="$stock"; [ "$build" = patched ] && python="$patched"
    log="$scratch/$(basename "$test" .py).$build.log"
    code=0
    (cd "$scratch" && "$python" -m pytest "$test" -q -p no:cacheprovider) >"$log" 2>&1 || code=$?
    outcome="$(grep -E '^[0-9]+ (passed|failed)|^=+ .*(passed|failed)' "$log" | tail -n 1 | tr -d '=' | xargs)"
    if { [ "$build" = stock ] && [ "$code" -ne 0 ]; } || { [ "$build" = patched ] && [ "$code" -eq 0 ]; }; then
      verdict="as expected"
    else
      verdict="NOT AS EXPECTED (stock must fail, patched must pass)"; status=1
      sed 's/^/    /' "$log" | tail -n 40
    fi
    printf '%-52s %-8s %-32s %s\n' "$test" "$build" "${outcome:-exit $code}" "$verdict"
  done
done
exit "$status"
