#!/usr/bin/env bash
# Usage: scripts/apply.sh --help
#
# The entry point of a clone: the command itself (its grammar, help text and
# modes) is torch_backport/cli.py, run by the python3 on PATH; `torch-backport
# apply` is the same command, installed. This shim only finds that Python.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v python3 >/dev/null; then
  echo "scripts/apply.sh: needs python3 on PATH to read its arguments" >&2
  exit 1
fi
exec python3 "$here/../torch_backport/_launch.py" apply "$@"
