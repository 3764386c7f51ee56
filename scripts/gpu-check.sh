#!/usr/bin/env bash
# Usage: scripts/gpu-check.sh --python PY ... | --help: the check of a CUDA machine
# (docs/gpu-check.md). The check itself is test/harness/gpu_check.py,
# run by the python3 on PATH; this shim only finds that Python.
set -euo pipefail
if ! command -v python3 >/dev/null; then
  echo "gpu-check.sh: needs python3 on PATH" >&2
  exit 1
fi
exec python3 "$(dirname "${BASH_SOURCE[0]}")/../test/harness/gpu_check.py" "$@"
