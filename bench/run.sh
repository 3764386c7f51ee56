#!/usr/bin/env bash
# Usage: bench/run.sh [--quick] [--repeats N] [--only TEXT] [--out DIR]
#        bench/run.sh --warm-start-only [--quick] [--repeats N] [--out DIR]
#        bench/run.sh --help
#
# Reproduces the README's benchmark tables and plots in one command: sets up
# (or reuses) the venvs it compares (scripts/venv.sh, scripts/apply.sh) and a
# small venv with matplotlib, then runs
#
# - bench/bench.py: compiles every configuration cold and warm in new
#   processes, stock 2.11.0, patched 2.11.0 and upstream 2.15.0 (what `pip
#   install torch` gives, and the newest release) interleaved;
#   writes DIR/results.json, results.md, warm_breakdown.png and
#   pregrad_vs_size.png (DIR defaults to bench-out/). --quick, --repeats
#   (default 3) and --only are its options.
# - bench/warm_start.py: the whole-process warm start (spawning python to the
#   first compiled result, warm cache directory) of stock 2.11.0, patched
#   2.11.0 (default topic; the copy torch-2.11.0-patched-default), patched
#   2.11.0 with both topics (torch-2.11.0-patched-isa; both copies are remade
#   on every run) and upstream 2.15.0,
#   round-robin; adds its section to DIR/results.json and results.md and
#   writes DIR/warm_start_process.png. 5 repeats (2 with --quick); with
#   --warm-start-only only this figure is made and --repeats N sets them.
#
# How long (it prints progress and an estimate): each configuration is 18
# processes, each paying the per-process CPU-ISA probe (7-15 s on CUDA wheels,
# outside the clock) besides its compile: about 8 minutes a configuration on
# 2 cores (2026-12-03: --only with 4 configurations, 32 min), so the full run
# of 15 takes about two hours; --quick (3 of them) about 20 min;
# --warm-start-only about 6 (5 repeats). Keep the machine otherwise idle: the
# figures are wall-clock times.
# Exit codes: 0 done; 1 a step failed; 2 usage error.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
case "${1:-}" in -h|--help) usage; exit 0 ;; esac

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
scripts="$repo/scripts"
source "$scripts/common.sh"
cache="$pregrad_cache"

warm_only=0 quick=0 repeats="" out="" bench_args=() bench_only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --warm-start-only) warm_only=1 ;;
    --quick) quick=1; bench_args+=("$1") ;;
    --repeats|--out|--only)
      [ $# -ge 2 ] || { echo "bench: $1 needs a value" >&2; usage >&2; exit 2; }
      case "$1" in
        --repeats) repeats="$2" ;;
        --out) out="$2" ;;
        *) bench_only+=("$1") ;;
      esac
      bench_args+=("$1" "$2"); shift ;;
    *) bench_args+=("$1"); bench_only+=("$1") ;;
  esac
  shift
done
if [ "$warm_only" = 1 ]; then
  if [ ${#bench_only[@]} -gt 0 ]; then
    echo "bench: not with --warm-start-only: ${bench_only[*]}" >&2; usage >&2; exit 2
  fi
  ws_repeats="${repeats:-$([ "$quick" = 1 ] && echo 2 || echo 5)}"
else
  ws_repeats="$([ "$quick" = 1 ] && echo 2 || echo 5)"
fi
stock="$("$scripts/venv.sh" 2.11.0 | tail -n 1)"
# Fresh hard-linked copies: test.sh's torch-2.11.0-patched carries every topic.
patched="$("$scripts/venv.sh" 2.11.0 --patched-copy torch-2.11.0-patched-default | tail -n 1)"
patched_isa="$("$scripts/venv.sh" 2.11.0 --patched-copy torch-2.11.0-patched-isa \
  -- --topic pre-grad-pass-timing --topic cpu-isa-probe | tail -n 1)"
newest="$("$scripts/venv.sh" 2.15.0 | tail -n 1)"
upstream="$newest"

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
if [ "$warm_only" = 0 ]; then
  "$tools/bin/python" "$here/bench.py" --stock "$stock" --patched "$patched" \
    --upstream "$upstream" ${bench_args[@]+"${bench_args[@]}"}
fi
exec "$tools/bin/python" "$here/warm_start.py" --stock "$stock" --patched "$patched" \
  --patched-isa "$patched_isa" --upstream "$newest" --repeats "$ws_repeats" \
  --out "${out:-bench-out}"
