#!/usr/bin/env bash
# Usage: scripts/test.sh [--releases 2.11.0,2.14.1] [-- PYTEST_ARGS ...]
#        scripts/test.sh --help
#
# Runs every test, on a fresh machine too. For each torch release in
# patches/releases.tsv (or those named with --releases) it makes sure a venv
# with that stock torch exists under $PREGRAD_CACHE/venvs (scripts/venv.sh;
# the first run downloads about 4.6 GB per release, and lifts a pip-configured
# cap on torch for those installs, saying so; files that two venvs share byte
# for byte are then hard-linked, with util-linux's hardlink), makes a
# hard-linked copy of it and applies every topic there (apply.sh --topic all
# picks each topic's series by the files' content; it writes each file by
# atomic rename, so the stock venv keeps its bytes), installs redis-server if
# it is missing (as root, with apt-get), then runs test/dynamo on the stock
# and the patched build:
#   - stock: each test must pass or fail exactly as
#     test/dynamo/stock_expectations.py says (the behaviour, stale-hit and
#     remote-cache tests fail on every base without the feature; the result
#     tests, real torchvision networks among them (test/torchvision.tsv pins
#     each release's torchvision), fail where upstream returns wrong
#     numbers), so a test that cannot
#     fail is caught; a full-tier stock run keeps the tests whose stock
#     outcome differs from patched, all of 2.12.0 and the tool suites
#     (stock_expectations.checks_something_on_stock);
#   - patched: every test must pass (stock_expectations.py names the one
#     needless miss 2.15.0 keeps, upstream's autocast keying).
# Tiers by content: a release whose installed files equal another tested
# release's (test/harness/content_identity.py computes it each run, and lists
# what it ignores: version stamps, CUDA-only files) runs the short tier:
# identification, apply/--status/--revert on its real install, --wheel's
# rules and three compile cells that tell stock from patched; the series
# base of each content (else the newest) runs everything.
# The tool suite (test/tools) runs once, against small installs built from
# the stock 2.11.0 and 2.12.0 venvs, and starts as soon as those two are set
# up, while the other venvs install. When 2.11.0 is tested, the patched
# wheel: `apply.sh --wheel torch==2.11.0` builds it from the cached release
# wheel (about a minute), pip installs it into another hard-linked copy of the
# stock venv, and that venv runs test/dynamo/test_installed_patched_wheel.py
# (pip check, --status, every installed file's sha256 against the patched
# 2.11.0 copy, the README's hash-pin recipe in a fresh venv). A job starts as
# soon as its venvs are ready: one at a time while venvs install, then two.
# At the end it prints a table build x suite -> passed / failed /
# expected-fail with a verdict, each job's wall time and tier, and a
# summary line. Full pytest output, expected failures included, goes to log
# files under $PREGRAD_LOGS (default: test-logs/ in the repository), not to
# the terminal.
#
# --releases LIST  comma-separated torch releases to test (default: every
#                  release in patches/releases.tsv); the tool suite runs whenever
#                  2.11.0 and 2.12.0 are part of the run. --bases v2.11.0 is
#                  the old spelling and still works.
# PYTEST_ARGS      (after --) go to every pytest run; the stock checks are
#                  skipped then, since a selection says nothing about "fails
#                  exactly where expected".
# Environment: PREGRAD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pregrad-backport),
# PREGRAD_LOGS (default <repo>/test-logs).
# Exit codes: 0 every cell as required; 1 anything else; 2 usage error.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
source "$here/common.sh"
cd "$repo"

all_releases="$(grep -v '^#' patches/releases.tsv | cut -f1 | paste -sd, -)"
releases="$all_releases"
pytest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --releases|--bases)
      [ $# -ge 2 ] || { echo "test.sh: $1 needs a list, e.g. 2.11.0" >&2; exit 2; }
      releases="$(printf '%s' "$2" | sed 's/\(^\|,\)v/\1/g')"; shift 2 ;;
    --) shift; pytest_args=("$@"); break ;;
    *) echo "test.sh: unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
IFS=, read -r -a selected <<<"$releases"
[ ${#selected[@]} -gt 0 ] || { echo "test.sh: --releases names no release (have: $all_releases)" >&2; exit 2; }
for version in "${selected[@]}"; do
  case ",$all_releases," in
    *",$version,"*) ;;
    *) echo "test.sh: $version is not in patches/releases.tsv (have: $all_releases)" >&2; exit 2 ;;
  esac
done

logs="${PREGRAD_LOGS:-$repo/test-logs}"
rm -rf "$logs"
mkdir -p "$logs"
step() { printf '== %s\n' "$*" >&2; }
started=$SECONDS

# The remote-cache tests run a real redis-server (Debian's package).
if ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    step "installing redis-server (apt-get; logs: $logs/apt.log)"
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server; } \
      >"$logs/apt.log" 2>&1 || { echo "test.sh: apt-get install redis-server failed; see $logs/apt.log" >&2; exit 1; }
  else
    echo "test.sh: redis-server is missing; install it (sudo apt-get install redis-server) and rerun" >&2
    exit 1
  fi
fi

export PYTORCH_PRINT_REPRO_ON_FAILURE=0
# The tests start apply.sh (whose launcher is `python3`) hundreds of times.
# Where python3 is a version manager's shim (pyenv's costs 0.3 s a call
# here) they get the interpreter the shim would run, first on PATH.
PATH="$(dirname "$(python3 -c 'import sys; print(sys.executable)')"):$PATH"
export PATH
status=0 total_passed=0 total_failed=0 total_xfail=0
rows=()
dynamo_suites=(test/dynamo/test_release_identification.py
               test/dynamo/test_pre_grad_pass_timing.py test/dynamo/test_pre_grad_stale_hits.py
               test/dynamo/test_pre_grad_remote_cache.py test/dynamo/test_pre_grad_results.py
               test/dynamo/test_cpu_isa_probe.py test/dynamo/test_autocast_cache.py
               test/dynamo/test_torchao_quant_lift_up.py test/dynamo/test_real_models.py)
# Stock builds only: they need the release's own files.
stock_only_suites=(test/dynamo/test_patched_wheel_rules.py test/dynamo/test_real_install_round_trip.py)
# The results suites are a patched build's longest; they run as a job of
# their own.
results_suite=test/dynamo/test_pre_grad_results.py
real_models_suite=test/dynamo/test_real_models.py
other_suites=()
for suite in "${dynamo_suites[@]}"; do
  [ "$suite" = "$results_suite" ] || [ "$suite" = "$real_models_suite" ] || other_suites+=("$suite")
done
# The short tier (a release whose content another tested release has, see
# test/harness/content_identity.py): identification, the real install's
# round trip and --wheel's rules, and compile cells that tell stock from
# patched on every release: the results cell upstream gets wrong, a
# behaviour test of the feature, the autocast key.
short_cells=("$results_suite::PreGradResultsTests::test_matches_eager_timing_late_freezing_entry_compile_fx_model_name_conv_bn"
             "test/dynamo/test_pre_grad_pass_timing.py::PreGradPassTimingTests::test_pre_grad_passes_default_timing_with_uuid"
             "test/dynamo/test_autocast_cache.py::AutocastCacheTests::test_region_without_dtype_misses_under_another_ambient_dtype")

verdict() {  # verdict REPORT BUILD [VERSION]: one row per suite of REPORT.xml
  local report="$1" build="$2" version="${3:-}" line suite counts result p f x
  if [ ! -f "$logs/$report.xml" ]; then
    rows+=("$build|-|pytest did not run|FAILED, see $logs/$report.log"); status=1
    total_failed=$((total_failed + 1)); return
  fi
  local args=("$logs/$report.xml" --by-suite)
  case "$version" in
    "") ;;
    patched:*) args+=(--expect-patched "${version#patched:}") ;;
    *) args+=(--expect-stock "$version") ;;
  esac
  local output code=0
  output="$(python3 "$here/../test/harness/junit_summary.py" "${args[@]}" 2>>"$logs/$report.log")" || code=$?
  if [ -z "$output" ]; then
    rows+=("$build|-|job $report ran no test (all deselected?)|FAILED, see $logs/$report.log"); status=1
    total_failed=$((total_failed + 1)); return
  fi
  while IFS='|' read -r suite counts result; do
    [ -n "$suite" ] || continue
    read -r p _ f _ x _ <<<"$counts"
    total_passed=$((total_passed + p)); total_failed=$((total_failed + f))
    total_xfail=$((total_xfail + x))
    [ "$result" = "${result#FAILED}" ] || result="$result, see the end of $logs/$report.log"
    rows+=("$build|$suite|$counts|$result")
  done <<<"$output"
  [ "$code" -eq 0 ] || status=1
}

run_job() {  # run_job REPORT PYTHON EXPRESSION ENV ARGS...: pytest, output to files
  local report="$1" python="$2" expression="$3" environment="$4" begun=$SECONDS
  local select=()
  [ -z "$expression" ] || select=(-k "$expression")
  # -rs: the log says why a test skipped (test/torchao.tsv's reason, say).
  # --durations: the log says where a job's time goes.
  env ${environment:+"$environment"} "$python" -m pytest -q -rs -p no:randomly --tb=short --durations=15 \
    --junitxml="$logs/$report.xml" ${select[@]+"${select[@]}"} "${@:5}" \
    ${pytest_args[@]+"${pytest_args[@]}"} >"$logs/$report.log" 2>&1 || true
  echo $((SECONDS - begun)) >"$logs/$report.seconds"
  printf '   done %-28s %d min %02d s\n' "$report" $(( (SECONDS - begun) / 60 )) $(( (SECONDS - begun) % 60 )) >&2
}

# Every pytest run is a job: REPORT|BUILD|EXPECT|PYTHON|-k EXPRESSION|ENV|ARGS,
# EXPECT being VERSION (the stock check), patched:VERSION or empty (all pass).
# A job starts as soon as what it needs is set up and a core is free: while
# venvs still install (downloads and unzipping, about one core) one job runs,
# then two, for two cores, in the order queued (the longest first).
queued=()   # every job, in the order queued (the summary's order)
pending=()  # queued and not started
queue() { queued+=("$1"); pending+=("$1"); }
launch() {  # launch LIMIT: start pending jobs while fewer than LIMIT run
  local report python expression environment args
  while [ ${#pending[@]} -gt 0 ] && [ "$(jobs -rp | wc -l)" -lt "$1" ]; do
    IFS='|' read -r report _ _ python expression environment args <<<"${pending[0]}"
    pending=("${pending[@]:1}")
    read -r -a job_args <<<"$args"
    run_job "$report" "$python" "$expression" "$environment" "${job_args[@]}" &
  done
}

queue_full_tier() {  # queue_full_tier VERSION: every suite, stock and patched
  local version="$1"
  queue "patched-$version-results|patched-$version|patched:$version|${patched[$version]}|||$results_suite $real_models_suite"
  if [ ${#pytest_args[@]} -eq 0 ]; then
    # The random properties (stacks of modules, compile sequences under
    # autocast) prove nothing on stock (they may or may not draw a failing
    # case), and of the rest a stock run keeps what it can tell
    # (conftest.py, stock_expectations.checks_something_on_stock). The
    # two-process autocast test repeats on stock what the one-process tests
    # already show there: patched only.
    queue "stock-$version|stock-$version|$version|${stock[$version]}|not random_stacks and not under_autocast and not processes_sharing_a_cache|PREGRAD_STOCK_DISCRIMINATING=$version|${dynamo_suites[*]} ${stock_only_suites[*]}"
  fi
  queue "patched-$version|patched-$version|patched:$version|${patched[$version]}|||${other_suites[*]}"
}

declare -A stock patched tier why
setup_release() {  # setup_release VERSION: the stock venv and its patched copy
  local version="$1"
  if ! stock[$version]="$("$here/venv.sh" "$version" 2>>"$logs/venvs.log" | tail -n 1)"; then
    echo "test.sh: could not set up torch $version; see $logs/venvs.log" >&2; exit 1
  fi
  if ! patched[$version]="$("$here/venv.sh" "$version" --patched-copy "torch-$version-patched" \
                            -- --topic all 2>>"$logs/venvs.log" | tail -n 1)"; then
    echo "test.sh: applying the series to a copy of the torch $version venv failed; see $logs/venvs.log" >&2; exit 1
  fi
  echo "   $version: stock ${stock[$version]}, patched ${patched[$version]} ($(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s in)" >&2
  # A release the index has no torchvision built for: say what it got.
  awk -F'\t' -v release="$version" '!/^#/ && $1 == release && $3 !~ /^built for torch / {
    print "   " release ": torchvision " $2 " (" $3 ")"}' test/torchvision.tsv >&2
}

build_wheel() {  # the patched 2.11.0 wheel, pip-installed into a copy of the stock venv
  step "patched wheel of torch 2.11.0, installed into a copy of its venv (logs: $logs/wheel.log)"
  local built wheel_venv="$pregrad_cache/venvs/torch-2.11.0-wheel"
  built="$("$here/apply.sh" --wheel torch==2.11.0 --out "$pregrad_cache/patched-wheels" \
           2>>"$logs/wheel.log" | tee -a "$logs/wheel.log" | sed -n 's/^wrote //p')" || true
  if [ -z "$built" ] || ! { rm -rf "$wheel_venv" \
      && cp -al "$(dirname "$(dirname "${stock[2.11.0]}")")" "$wheel_venv" \
      && "$wheel_venv/bin/python" -m pip install --disable-pip-version-check --no-deps "$built" \
         >>"$logs/wheel.log" 2>&1; }; then
    echo "test.sh: building or installing the patched 2.11.0 wheel failed; see $logs/wheel.log" >&2; exit 1
  fi
  export PREGRAD_PATCHED_WHEEL="$built" PREGRAD_PATCHED_COPY_PYTHON="${patched[2.11.0]}"
  echo "   $built" >&2
  # Its files are compared with the patched 2.11.0 copy's, which runs every
  # suite; the README's hash-pin recipe (a rebuild, a fresh venv) makes it
  # one of the longer jobs.
  queue "wheel-2.11.0|wheel-2.11.0||$wheel_venv/bin/python|||test/dynamo/test_installed_patched_wheel.py"
  # uv in place on the real wheel (now in the cache), and two foreign
  # targets' patched wheels from their real release wheels.
  queue "uv-fleet|tools||${stock[2.11.0]}||PREGRAD_UV_FLEET=1|test/tools/test_uv_end_to_end.py"
}

# The tool suite needs stock 2.11.0 and 2.12.0 only: those are set up first.
# A release a series is cut against (patches/v<release>/) runs the full tier
# whatever else is tested (content_identity.py makes it the reference of its
# content), so its jobs start while the other venvs install; the others wait
# for the tiers by content.
step "venvs (logs: $logs/venvs.log); jobs start as their venvs are ready (logs: $logs/<job>.log)"
ordered=()
for version in 2.11.0 2.12.0 "${selected[@]}"; do
  case " ${selected[*]} " in *" $version "*) ;; *) continue ;; esac
  case " ${ordered[*]-} " in *" $version "*) continue ;; esac
  ordered+=("$version")
done
for version in "${ordered[@]}"; do
  setup_release "$version"
  if [ -n "${stock[2.11.0]:-}" ] && [ -n "${stock[2.12.0]:-}" ] && [ -z "${tools_queued:-}" ]; then
    export PREGRAD_STOCK_PYTHON="${stock[2.11.0]}" PREGRAD_UPSTREAM_PYTHON="${stock[2.12.0]}"
    # test_new_base.py needs every base's stock venv: a job of its own, below.
    queue "tools|tools||${patched[2.11.0]}|||test/tools --ignore=test/tools/test_new_base.py --ignore=test/tools/test_uv_end_to_end.py"
    tools_queued=1
  fi
  if [ -n "${tools_queued:-}" ] && [ -n "${stock[2.11.0]:-}" ] && [ -z "${wheel_built:-}" ]; then
    launch 1
    build_wheel
    wheel_built=1
  fi
  if [ -d "$repo/patches/v$version" ]; then
    tier[$version]=full why[$version]="patches/v$version is cut against it"
    queue_full_tier "$version"
  fi
  launch 1
done
if [ -n "${stock[2.11.0]:-}" ] && [ -z "${wheel_built:-}" ]; then
  build_wheel
fi

# Tiers by content: computed from the installed files now, not from versions.
site_of() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
identity_args=()
for version in "${selected[@]}"; do
  identity_args+=("$version=$(site_of "${stock[$version]}")")
done
step "tiers by content (test/harness/content_identity.py)"
# A test venv's python: it has pyelftools (requirements/test.txt).
if ! identity="$("${stock[${selected[0]}]}" "$here/../test/harness/content_identity.py" \
                 "${identity_args[@]}" 2>>"$logs/venvs.log")"; then
  echo "test.sh: could not compare the releases' files; see $logs/venvs.log" >&2; exit 1
fi
short_jobs=()  # after the full ones: longest first
while IFS='|' read -r version level reason; do
  echo "   $version: $level tier ($reason)" >&2
  if [ -n "${tier[$version]:-}" ]; then
    [ "$level" = full ] || { echo "test.sh: $version is a series base but content_identity.py gives it the $level tier" >&2; exit 1; }
    why[$version]="$reason"
    continue
  fi
  tier[$version]="$level" why[$version]="$reason"
  if [ "$level" = full ]; then
    queue_full_tier "$version"
  else
    short_jobs+=("patched-$version-short|patched-$version|patched:$version|${patched[$version]}|||test/dynamo/test_release_identification.py ${short_cells[*]}")
    [ ${#pytest_args[@]} -gt 0 ] || short_jobs+=("stock-$version-short|stock-$version|$version|${stock[$version]}|||test/dynamo/test_release_identification.py ${stock_only_suites[*]} ${short_cells[*]}")
  fi
done <<<"$identity"
for job in ${short_jobs[@]+"${short_jobs[@]}"}; do
  queue "$job"
done

# scripts/new-base, rehearsed on every base: the stock venv of each base's
# release, and of 2.12.1 (a release whose files are a base's).
new_base_releases=(2.9.0 2.9.1 2.10.0 2.11.0 2.12.0 2.12.1 2.13.0 2.14.1)
new_base_pythons=""
for version in "${new_base_releases[@]}"; do
  [ -n "${stock[$version]:-}" ] || { new_base_pythons=""; break; }
  new_base_pythons+="${new_base_pythons:+,}$version=${stock[$version]}"
done
if [ -n "$new_base_pythons" ]; then
  queue "new-base|tools||${stock[2.11.0]}||PREGRAD_RELEASE_PYTHONS=$new_base_pythons|test/tools/test_new_base.py"
else
  echo "   new-base rehearsal: not run (needs ${new_base_releases[*]} among --releases)" >&2
fi

step "${#queued[@]} pytest runs in all, two at a time from here"
while [ ${#pending[@]} -gt 0 ]; do
  launch 2
  wait -n || true
done
wait

for job in "${queued[@]}"; do
  IFS='|' read -r report build version _ _ _ _ <<<"$job"
  verdict "$report" "$build" "$version"
done

printf '\n%-16s %-32s %-44s %s\n' build suite outcome verdict
for row in "${rows[@]}"; do
  IFS='|' read -r label suite counts result <<<"$row"
  printf '%-16s %-32s %-44s %s\n' "$label" "$suite" "$counts" "$result"
done
printf '\n%-30s %-9s %s\n' job "wall time" tier
for job in "${queued[@]}"; do
  IFS='|' read -r report build _ _ _ _ _ <<<"$job"
  seconds="$(cat "$logs/$report.seconds" 2>/dev/null || echo 0)"
  version="${build#*-}"
  level="-"
  case "$build" in stock-*|patched-*) [ -z "${tier[$version]:-}" ] || level="${tier[$version]}: ${why[$version]}" ;; esac
  printf '%-30s %2d:%02d     %s\n' "$report" $((seconds / 60)) $((seconds % 60)) "$level"
done
echo "logs: $logs ($(( (SECONDS - started) / 60 )) min $(( (SECONDS - started) % 60 )) s)"
# A torch newer than every row of patches/releases.tsv is on the index: say
# so, and what identification gives for it (never a failure of this run).
python3 "$here/../test/harness/newer_release.py" 2>>"$logs/newer-release.log" || true
echo "expected failures on stock builds: $total_xfail (each one a defect or missing feature the tests detect)"
# A release scripts/new-base wrote is a candidate until its matrix passes.
if [ -f patches/candidates.tsv ]; then
  for candidate in $(grep -v '^#' patches/candidates.tsv | cut -f1); do
    case " ${selected[*]} " in *" $candidate "*) ;; *) continue ;; esac
    if [ "$status" -eq 0 ]; then
      echo "candidate $candidate: its matrix passed in this run; serve it: scripts/new-base $candidate --served"
    else
      echo "candidate $candidate: this run did not pass; it stays a candidate"
    fi
  done
fi
echo "summary: $total_passed passed, $total_failed failed"
exit "$status"
