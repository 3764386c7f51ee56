#!/usr/bin/env bash
# Usage: scripts/gpu-check.sh --python PY [--topic T]... [--test-deps DIR] [-- PYTEST_ARGS ...]
#        scripts/gpu-check.sh --help
#
# Runs on the GPU machine itself, offline, against the torch that PY imports
# (e.g. /opt/torch/.venv/bin/python): the behaviour, results, real-network
# and CUDA autocast suites with CUDA tensors (PREGRAD_TEST_DEVICE=cuda:
# torch's default device), on PY's torch as installed (stock), then patched,
# then reverted:
#   1. checks, writing nothing: PY imports torch and it sees a CUDA device;
#      PY has the test requirements (or --test-deps DIR has them); `apply.sh
#      --python PY --status` finds nothing of this project applied, since
#      the check ends by reverting and must not undo a patch of yours
#      (refused, exit 1: revert it first, or check a `cp -al` copy of the
#      venv); `apply.sh --check` would apply the topics;
#   2. stock: python -m pytest test/dynamo/test_pre_grad_pass_timing.py
#      test_pre_grad_results.py test_real_models.py test_cuda_autocast_cache.py;
#      its counts are shown beside the patched ones, with whether they are
#      what test/dynamo/stock_expectations.py says for this release on the
#      CPU (on the GPU they may differ: the conv-bn fold is CPU-only); the
#      stock run never fails the check;
#   3. `apply.sh --python PY [--topic T]...`, then the same run: every test
#      must pass (junit_summary.py --expect-patched);
#   4. `apply.sh --python PY --revert [--topic T]...`, also when a step fails
#      or on Ctrl-C once step 3 began, then every file of torch's RECORD that
#      has a sha256 must match it ("RECORD: N files, all match").
# It ends with a table (suite | stock passed/failed | patched passed/failed
# and verdict), each phase's wall time and the log paths.
# Without a CUDA device (torch.cuda.is_available() is false in PY; nvidia-smi
# is not needed) it says "no CUDA device" and exits 0, having written
# nothing: no log, no venv, no download, no apply.
#
# --python PY      the interpreter whose torch is checked (required)
# --topic T        the topics to apply and revert, as apply.sh takes them
#                  (repeat it, or T1,T2; default: the default topics)
# --test-deps DIR  wheels of the test requirements, for a PY that lacks
#                  pytest, hypothesis or expecttest (or numpy), made on a
#                  machine with network access, for PY's Python and platform
#                  (hypothesis's wheels are compiled), e.g. for Python 3.12:
#                    pip download -d DIR --only-binary=:all: --python-version 3.12 \
#                      --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
#                      -r requirements/gpu-check.txt
#                  (run without it, the check prints that command for PY).
#                  Each wheel of DIR whose distribution PY lacks is unzipped
#                  into a temporary directory, put on PYTHONPATH for the
#                  pytest runs only; nothing is installed into PY's
#                  site-packages. Without DIR, a PY that lacks them is
#                  refused (exit 1) with that command.
# PYTEST_ARGS      (after --) go to both pytest runs (e.g. -k EXPR).
# Needs git and python3 on PATH (apply.sh, test/harness/junit_summary.py);
# no network. Budget: under 8 minutes on a GPU machine (not yet measured: no
# CUDA machine was at hand).
# Environment: PREGRAD_LOGS (default <repo>/test-logs): logs go to
# $PREGRAD_LOGS/gpu-*.log and gpu-*.xml.
# Exit codes: 0 every patched test passed and the revert left torch's RECORD
# matched (or no CUDA device here); 1 a check failed, or refused (PY's torch
# not pristine, test requirements missing); 2 usage error (no --python, PY
# missing or without torch, an unknown topic).
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
python="" test_deps="" topics=() pytest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --python|--topic|--test-deps)
      [ $# -ge 2 ] || { echo "gpu-check.sh: $1 needs a value (see --help)" >&2; exit 2; }
      case "$1" in
        --python) python="$2" ;;
        --topic) topics+=(--topic "$2") ;;
        --test-deps) test_deps="$2" ;;
      esac
      shift 2 ;;
    --release) echo "gpu-check.sh: --release is gone: the torch checked is PY's (--python PY; see --help)" >&2
               exit 2 ;;
    --) shift; pytest_args=("$@"); break ;;
    *) echo "gpu-check.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$python" ]; then
  echo "gpu-check.sh: --python PY is required: the interpreter whose torch to check, e.g." \
       "/opt/torch/.venv/bin/python (see --help)" >&2
  exit 2
fi
# Absolute paths (the runs happen in the repository), symbolic links kept:
# a venv's bin/python is one, and the venv is what it names.
given="$python"
case "$python" in
  */*) [ -f "$python" ] && [ -x "$python" ] \
         || { echo "gpu-check.sh: --python $python: no such interpreter" >&2; exit 2; }
       python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")" ;;
  *) command -v "$python" >/dev/null \
       || { echo "gpu-check.sh: --python $python: no such interpreter on PATH" >&2; exit 2; }
     python="$(command -v "$python")" ;;
esac
if [ -n "$test_deps" ]; then
  [ -d "$test_deps" ] || { echo "gpu-check.sh: --test-deps $test_deps: no such directory" >&2; exit 2; }
  test_deps="$(cd "$test_deps" && pwd)"
fi

# Does PY import torch, and does it see a CUDA device? Before anything writes.
probe="$("$python" -c '
import torch
cuda = torch.cuda.is_available()
print("gpu-check:", torch.__version__, cuda, torch.cuda.get_device_name(0) if cuda else "")
' 2>&1)" || {
  [ "$given" = "$python" ] || given="$given ($python)"
  echo "gpu-check.sh: --python $given cannot import torch: $(printf '%s\n' "$probe" | tail -n 1)" >&2
  exit 2
}
read -r _ version cuda device <<<"$(printf '%s\n' "$probe" | grep '^gpu-check: ' | tail -n 1)"
if [ "$cuda" != True ]; then
  echo "gpu-check.sh: no CUDA device (torch $version at $python sees none): nothing to check"
  exit 0
fi

step() { printf '== %s\n' "$*" >&2; }
checks_begun=$SECONDS
step "torch $version at $python, on $device"

# The test requirements: what PY cannot import, with DIRECTORY (if any) first
# on its path.
missing_requirements() {  # missing_requirements [DIRECTORY]
  PYTHONPATH="${1:-}${1:+${PYTHONPATH:+:}}${PYTHONPATH:-}" "$python" -c '
import importlib
missing = []
for name in ("pytest", "hypothesis", "expecttest", "numpy"):
    try:
        importlib.import_module(name)
    except Exception:
        missing.append(name)
print(" ".join(missing))' 2>/dev/null
}
requirements_help() {  # requirements_help MISSING...: how to make DIR
  local target numpy=""
  # Some of the pinned wheels are compiled (hypothesis's, numpy's): fetched
  # for PY's Python and platform.
  target="$("$python" -c '
import platform, sys, sysconfig
name = sysconfig.get_platform()
if name.startswith("linux"):
    libc = platform.libc_ver()[1].split(".")
    minor = int(libc[1]) if len(libc) > 1 and libc[1].isdigit() else 17
    tags = [f"manylinux_2_{y}_{platform.machine()}" for y in (17, 28) if y <= max(minor, 17)]
else:
    tags = [name.replace("-", "_").replace(".", "_")]
print("--python-version %d.%d" % sys.version_info[:2], *(f"--platform {t}" for t in tags))')"
  case " $* " in
    *" numpy "*) numpy=" $(grep '^numpy==' "$repo/requirements/test.txt")" ;;
  esac
  echo "  On a machine with network access, in this repository (the wheels are for PY's Python and platform):" >&2
  echo "    pip download -d DIR --only-binary=:all: $target -r requirements/gpu-check.txt$numpy" >&2
  echo "  then copy DIR here and rerun with --test-deps DIR: its wheels are unzipped into a" >&2
  echo "  temporary directory on PYTHONPATH for the pytest runs only; nothing is installed into PY." >&2
}
missing="$(missing_requirements)"
if [ -z "$missing" ] && [ -n "$test_deps" ]; then
  echo "   $python has the test requirements: the wheels of --test-deps are not needed" >&2
fi
if [ -n "$missing" ] && [ -z "$test_deps" ]; then
  echo "gpu-check.sh: $python lacks the test requirements: $missing; nothing was run" >&2
  requirements_help $missing
  exit 1
fi

# PY's torch must be pristine: the check ends by reverting.
status_code=0
status_output="$("$here/apply.sh" --python "$python" --status 2>&1)" || status_code=$?
if [ "$status_code" -ne 0 ] || printf '%s\n' "$status_output" | grep -q '^patched'; then
  if printf '%s\n' "$status_output" | grep -q '^patched'; then
    echo "gpu-check.sh: $python's torch has this project's series applied (apply.sh --status below)." >&2
    echo "  This check runs stock first, then patched, then reverts: it would undo your patch," >&2
    echo "  so it refuses; nothing was run. Revert it first ($here/apply.sh --python $python" >&2
    echo "  --revert, with --topic all if you applied cpu-isa-probe), or check a copy of the venv" >&2
    echo "  (cp -al VENV COPY: apply.sh writes by atomic rename, so VENV keeps its bytes)." >&2
  else
    echo "gpu-check.sh: apply.sh --status does not find $python's torch pristine (exit" \
         "$status_code; its output below); nothing was run" >&2
  fi
  printf '%s\n' "$status_output" | sed 's/^/    /' >&2
  exit 1
fi
check_code=0
check_output="$("$here/apply.sh" --python "$python" ${topics[@]+"${topics[@]}"} --check 2>&1)" \
  || check_code=$?
if [ "$check_code" -ne 0 ]; then
  printf '%s\n' "$check_output" | sed 's/^/    /' >&2
  echo "gpu-check.sh: apply.sh --check${topics[*]:+ ${topics[*]}} refuses (exit $check_code, above); nothing was run" >&2
  [ "$check_code" -eq 2 ] && exit 2
  exit 1
fi

# Every file of torch's RECORD with a sha256: its count, then each that differs.
record_check() {
  "$python" -c '
import base64, hashlib, importlib.metadata as metadata
files = [f for f in metadata.distribution("torch").files or [] if f.hash is not None]
print(len(files))
for f in files:
    digest = hashlib.new(f.hash.mode)
    try:
        with open(f.locate(), "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        print(f"{f} (missing)")
        continue
    if base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode() != f.hash.value:
        print(f)'
}
record_before="$(record_check)" && [ "$(printf '%s\n' "$record_before" | head -n 1)" != 0 ] || {
  echo "gpu-check.sh: torch's RECORD, read through importlib.metadata in $python, lists no file" \
       "with a hash: the check could not tell at its end that the revert left torch as" \
       "installed; nothing was run" >&2
  exit 1
}
if [ -n "$(printf '%s\n' "$record_before" | tail -n +2)" ]; then
  echo "   note: these files of torch differ from its RECORD before this run (they will at its end too):" >&2
  printf '%s\n' "$record_before" | tail -n +2 | sed 's/^/     /' >&2
fi

# From here on the check writes: logs, and the wheels of --test-deps.
logs="${PREGRAD_LOGS:-$repo/test-logs}"
mkdir -p "$logs"
rm -f "$logs"/gpu-*.log "$logs"/gpu-*.xml
deps_root="" deps_dir="" pythonpath="${PYTHONPATH:-}"
applied="" reverted="" failed=""
declare -A seconds=()
revert_and_verify() {  # once, after the apply began: --revert, then torch's RECORD
  [ -n "$applied" ] && [ -z "$reverted" ] || return 0
  reverted=1
  local begun=$SECONDS after count mismatches
  step "revert: apply.sh --python PY --revert${topics[*]:+ ${topics[*]}} (log: $logs/gpu-revert.log)"
  if ! "$here/apply.sh" --python "$python" --revert ${topics[@]+"${topics[@]}"} \
       >"$logs/gpu-revert.log" 2>&1; then
    echo "gpu-check.sh: --revert failed (see $logs/gpu-revert.log); $python's torch is not as" \
         "it was: see $here/apply.sh --python $python --status" >&2
    failed+=" the revert failed (see $logs/gpu-revert.log);"
  fi
  after="$(record_check)" || after=""
  count="$(printf '%s\n' "$after" | head -n 1)"
  mismatches="$(printf '%s\n' "$after" | tail -n +2)"
  if [ -z "$count" ]; then
    record_line="RECORD: could not be read (torch's importlib.metadata)"
    failed+=" torch's RECORD could not be read;"
  elif [ -z "$mismatches" ]; then
    record_line="RECORD: $count files, all match"
  else
    record_line="RECORD: $count files, $(printf '%s\n' "$mismatches" | wc -l) differ:"
    while IFS= read -r file; do
      if printf '%s\n' "$record_before" | tail -n +2 | grep -qxF -- "$file"; then
        record_line+=$'\n'"  $file (it differed before this run too)"
      else
        record_line+=$'\n'"  $file"
      fi
    done <<<"$mismatches"
    failed+=" files of torch differ from its RECORD;"
  fi
  echo "   $record_line" >&2
  seconds[revert]=$((SECONDS - begun))
}
cleanup() {
  local code=$?
  revert_and_verify
  [ -z "$deps_root" ] || rm -rf "$deps_root"
  [ -z "$failed" ] || [ "$code" -ne 0 ] || code=1
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -n "$missing" ]; then
  # Named site-packages: hypothesis takes a module there for a third party's,
  # not the project's own (whose constants it would scan, and cache in
  # .hypothesis/ here).
  deps_root="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-deps.XXXXXX")"
  deps_dir="$deps_root/site-packages"
  mkdir "$deps_dir"
  unzipped="$("$python" -c '
import importlib.metadata as metadata, pathlib, re, sys, zipfile
def name(text): return re.sub(r"[-_.]+", "-", text).lower()
have = {name(d.metadata["Name"]) for d in metadata.distributions() if d.metadata["Name"]}
for wheel in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    if name(wheel.name.split("-")[0]) not in have:
        zipfile.ZipFile(wheel).extractall(sys.argv[2])
        have.add(name(wheel.name.split("-")[0]))
        print(wheel.name)' "$test_deps" "$deps_dir")"
  step "test requirements from $test_deps, unzipped into $deps_dir (PYTHONPATH of the pytest runs):" \
       $unzipped
  still="$(missing_requirements "$deps_dir")"
  if [ -n "$still" ]; then
    echo "gpu-check.sh: $python cannot import $still, even with the wheels of $test_deps; nothing was run" >&2
    requirements_help $still
    exit 1
  fi
  pythonpath="$deps_dir${pythonpath:+:$pythonpath}"
fi
seconds[checks]=$((SECONDS - checks_begun))

suites=(test/dynamo/test_pre_grad_pass_timing.py test/dynamo/test_pre_grad_results.py
        test/dynamo/test_real_models.py test/dynamo/test_cuda_autocast_cache.py)
cd "$repo"
run_suites() {  # run_suites LABEL: pytest on PY's torch as it is now, with CUDA tensors
  local label="$1" begun=$SECONDS
  step "$label: pytest ${suites[*]##*/} (log: $logs/gpu-$label.log)"
  PYTHONPATH="$pythonpath" PREGRAD_TEST_DEVICE=cuda PYTORCH_PRINT_REPRO_ON_FAILURE=0 \
    "$python" -m pytest -q -rs -p no:randomly --tb=short --durations=15 \
    --junitxml="$logs/gpu-$label.xml" "${suites[@]}" ${pytest_args[@]+"${pytest_args[@]}"} \
    >"$logs/gpu-$label.log" 2>&1 || true
  seconds[$label]=$((SECONDS - begun))
  echo "   $(tail -n 1 "$logs/gpu-$label.log") ($((SECONDS - begun)) s)" >&2
}
summarize() {  # summarize LOG XML [FLAG VERSION]: junit_summary's "suite|counts|verdict"
  local log="$1"; shift  # lines; the tests that are not as expected go to LOG
  python3 "$repo/test/harness/junit_summary.py" "$@" 2>>"$log" || true
}
counted() {  # counted "N passed, N failed, N expected-fail[, N skipped]" -> "N passed, N failed[, N skipped]"
  local passed failed skipped
  read -r passed _ failed _ _ _ skipped _ <<<"${1//,/}"
  echo "$passed passed, $failed failed${skipped:+, $skipped skipped}"
}

run_suites stock
if [ ! -s "$logs/gpu-stock.xml" ]; then
  echo "gpu-check.sh: the stock run wrote no report: pytest did not run (see $logs/gpu-stock.log);" \
       "nothing was applied" >&2
  exit 1
fi

begun=$SECONDS
step "apply: apply.sh --python PY${topics[*]:+ ${topics[*]}} (log: $logs/gpu-apply.log)"
applied=1
if ! "$here/apply.sh" --python "$python" ${topics[@]+"${topics[@]}"} >"$logs/gpu-apply.log" 2>&1; then
  seconds[apply]=$((SECONDS - begun))
  echo "gpu-check.sh: apply.sh failed (see $logs/gpu-apply.log)" >&2
  exit 1
fi
seconds[apply]=$((SECONDS - begun))
run_suites patched
revert_and_verify

# The table: every suite of either run; stock's raw counts with whether they
# are what stock_expectations.py says for this release on the CPU.
declare -A stock_raw=() stock_judged=() patched_counts=() patched_verdict=()
while IFS='|' read -r suite counts _; do
  [ -z "$suite" ] || stock_raw[$suite]="$(counted "$counts")"
done <<<"$(summarize /dev/null "$logs/gpu-stock.xml" --by-suite)"
while IFS='|' read -r suite counts _; do
  [ -n "$suite" ] || continue
  read -r _ _ wrong _ <<<"${counts//,/}"
  if [ "$wrong" = 0 ]; then
    stock_judged[$suite]="as on the CPU"
  else
    stock_judged[$suite]="$wrong unlike the CPU"
  fi
done <<<"$(summarize "$logs/gpu-stock.log" "$logs/gpu-stock.xml" --by-suite --expect-stock "$version")"
patched_code=0
if [ -s "$logs/gpu-patched.xml" ]; then
  patched_lines="$(python3 "$repo/test/harness/junit_summary.py" "$logs/gpu-patched.xml" \
                   --by-suite --expect-patched "$version" 2>>"$logs/gpu-patched.log")" || patched_code=$?
else
  patched_lines="" patched_code=1
fi
while IFS='|' read -r suite counts verdict; do
  [ -n "$suite" ] || continue
  patched_counts[$suite]="$(counted "$counts")" patched_verdict[$suite]="$verdict"
done <<<"$patched_lines"
[ -n "$patched_lines" ] || patched_code=1
[ "$patched_code" -eq 0 ] || failed=" a patched test failed, or none ran (see the end of $logs/gpu-patched.log);$failed"

echo
printf '%-32s | %-50s | %s\n' "suite" "stock $version (passed/failed)" "patched (passed/failed/verdict)"
for suite in $(printf '%s\n' "${!stock_raw[@]}" "${!patched_counts[@]}" | sort -u); do
  stock_cell="${stock_raw[$suite]:--}${stock_judged[$suite]:+ (${stock_judged[$suite]})}"
  patched_cell="${patched_counts[$suite]:-did not run}${patched_verdict[$suite]:+ | ${patched_verdict[$suite]}}"
  printf '%-32s | %-50s | %s\n' "$suite" "$stock_cell" "$patched_cell"
done
if [ -z "$patched_lines" ]; then
  if [ -s "$logs/gpu-patched.xml" ]; then
    echo "patched: no test ran (see $logs/gpu-patched.log)"
  else
    echo "patched: pytest wrote no report (see $logs/gpu-patched.log)"
  fi
fi
echo "$record_line"
echo "wall time: checks ${seconds[checks]:-0} s, stock ${seconds[stock]:-0} s, apply" \
     "${seconds[apply]:-0} s, patched ${seconds[patched]:-0} s, revert and RECORD" \
     "${seconds[revert]:-0} s; $SECONDS s in all"
echo "logs: $logs/gpu-{stock,apply,patched,revert}.log (pytest's, and at their end the" \
     "tests unlike the expectations), gpu-{stock,patched}.xml"
if [ -n "$failed" ]; then
  echo "gpu-check.sh: FAILED:${failed%;}" >&2
  exit 1
fi
echo "gpu-check.sh: ok: every patched test passed, and the revert left torch as its RECORD says"
