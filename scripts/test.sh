#!/usr/bin/env bash
# Usage: scripts/test.sh [--releases 2.11.0,2.14.1] [--list] [-- PYTEST_ARGS ...]
# The version matrix (what .ci/run runs): test/harness/matrix.py, whose
# --help says what it runs and how it judges; this only starts it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec python3 "$here/../test/harness/matrix.py" "$@"
