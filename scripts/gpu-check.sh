#!/usr/bin/env bash
# Usage: scripts/gpu-check.sh [--release 2.11.0]
#        scripts/gpu-check.sh --help
#
# Where a CUDA device is present: runs the behaviour and results suites
# (test/dynamo/test_pre_grad_pass_timing.py, test_pre_grad_results.py) with
# CUDA tensors (PREGRAD_TEST_DEVICE=cuda: torch's default device) on the
# patched venv of one base (default 2.11.0) and on stock 2.12.0, and prints
# each run's counts and wall time. On the GPU, Inductor's pre-grad passes are
# others than on the CPU (group-batch and split-cat fusions), so this checks
# that the cache-aware timing holds there too. The venvs are the test
# command's (scripts/venv.sh; made here if missing). Without CUDA it says so
# and exits 0. Budget: well inside 10 minutes with the venvs in place.
# Logs: $PREGRAD_LOGS (default <repo>/test-logs)/gpu-*.log.
# Exit codes: 0 passed (or no CUDA here); 1 a run failed; 2 usage error.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
release=2.11.0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --release) [ $# -ge 2 ] || { echo "gpu-check.sh: --release needs a version" >&2; exit 2; }
               release="$2"; shift 2 ;;
    *) echo "gpu-check.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check.sh: no CUDA device here (nvidia-smi finds none): nothing to check"
  exit 0
fi
logs="${PREGRAD_LOGS:-$repo/test-logs}"
mkdir -p "$logs"
patched="$("$here/venv.sh" "$release" --patched-copy "torch-$release-patched" -- --topic all 2>>"$logs/gpu-venvs.log" | tail -n 1)"
upstream="$("$here/venv.sh" 2.12.0 2>>"$logs/gpu-venvs.log" | tail -n 1)"
nvidia-smi -L
status=0
cd "$repo"
for build in "patched-$release=$patched" "stock-2.12.0=$upstream"; do
  label="${build%%=*}" python="${build#*=}" begun=$SECONDS
  if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "gpu-check.sh: $label: torch sees no CUDA device" >&2; status=1; continue
  fi
  code=0
  PREGRAD_TEST_DEVICE=cuda "$python" -m pytest -q -p no:randomly --tb=short \
    test/dynamo/test_pre_grad_pass_timing.py test/dynamo/test_pre_grad_results.py \
    >"$logs/gpu-$label.log" 2>&1 || code=$?
  printf '%-16s %s  (%d s; log: %s)\n' "$label" "$(tail -n 1 "$logs/gpu-$label.log")" \
    $((SECONDS - begun)) "$logs/gpu-$label.log"
  # Stock 2.12.0 fails the results cells where upstream is wrong (as on the
  # CPU); the patched base must pass everything.
  [ "$label" != "patched-$release" ] || [ "$code" -eq 0 ] || status=1
done
exit "$status"
