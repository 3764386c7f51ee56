#!/usr/bin/env bash
# Usage: scripts/venv.sh VERSION [NAME]
#        scripts/venv.sh VERSION --patched-copy NAME [-- APPLY_ARGS...]
# A test venv with stock torch VERSION, or a patched hard-linked copy of it:
# test/harness/venvs.py (--help), which this only starts.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec python3 "$here/../test/harness/venvs.py" "$@"
