#!/usr/bin/env bash
# Usage: bench/run.sh [--quick] [--repeats N] [--out DIR]
#        bench/run.sh --help
#
# Reproduces the README's benchmark table and plots in one command: sets up
# (or reuses) the stock 2.11.0, patched 2.11.0 and upstream 2.12.0 venvs
# (scripts/venv.sh, scripts/apply.sh) and a small venv with matplotlib, then
# runs bench/bench.py, which compiles every configuration cold and warm in new
# processes, interleaving the builds, and writes DIR/results.json, results.md,
# warm_breakdown.png and pregrad_vs_size.png (DIR defaults to bench-out/).
#
# The full run takes about 30 minutes on 2 cores (it prints progress and an
# estimate); --quick takes about 3. Keep the machine otherwise idle: the
# figures are wall-clock times.
# Exit codes: 0 done; 1 a step failed; 2 usage error.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
scripts="$repo/scripts"
cache="${PREGRAD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pregrad-backport}"

stock="$("$scripts/venv.sh" 2.11.0 | tail -n 1)"
upstream="$("$scripts/venv.sh" 2.12.0 | tail -n 1)"
patched="$("$scripts/venv.sh" 2.11.0 torch-2.11.0-patched | tail -n 1)"
"$scripts/apply.sh" --python "$patched"

tools="$cache/venvs/bench-tools"
stamp="$(sha256sum "$repo/requirements/bench.txt" | cut -d' ' -f1)"
if [ "$(cat "$tools/.pregrad-ready" 2>/dev/null)" != "$stamp" ]; then
  echo "bench: creating $tools (matplotlib)" >&2
  rm -rf "$tools"
  python3 -m venv "$tools"
  "$tools/bin/python" -m pip install --disable-pip-version-check -q -r "$repo/requirements/bench.txt" >&2
  echo "$stamp" > "$tools/.pregrad-ready"
fi

cd "$repo"
exec "$tools/bin/python" "$here/bench.py" --stock "$stock" --patched "$patched" \
  --upstream "$upstream" "$@"
