#!/usr/bin/env bash
# Usage: scripts/apply.sh --python PY [--topic T]... [--check | --status | --revert [--check]]
#        scripts/apply.sh CHECKOUT [--topic T]... [--check | --no-commit | --status | --revert [--check]]
#        scripts/apply.sh --overlay BASE [--topic T]... [--python PY] [--out DIR]
#        scripts/apply.sh --help
#
# Brings torch 2.12's cache-aware pre-grad pass timing
# (torch._inductor.config.pre_grad_pass_timing) to a torch that lacks it, by
# applying the series in patches/<base>/ to an installed wheel or to a PyTorch
# git checkout.
#
# Topics (patches/topics.tsv): each topic is a series per base, applied,
# reported and reverted on its own.
#   pre-grad-pass-timing  (default) the feature, and the results fixes for the
#                         releases that have it; patches/<base>/
#   autocast-cache-key    (default) no stale AOTAutogradCache hit across
#                         autocast dtypes (pytorch#181564 and this project's
#                         fix, cf. #191110); graphs with autocast regions
#                         cached again on 2.12 and 2.13 (#192555);
#                         patches/<base>/autocast-cache-key/
#   cpu-isa-probe         (opt-in) CPU warm start: the vector-ISA probe's child
#                         processes stop importing torch (pytorch#183515,
#                         #189900, #190561); patches/<base>/cpu-isa-probe/
#   --topic T            act on topic T (repeat it, or T1,T2, or `all`).
#                        Without it apply, --revert and --overlay act on the
#                        default topics, and --status reports every topic. A
#                        default topic other than pre-grad-pass-timing that has
#                        no series for a release is reported as not available
#                        and left alone, unless named with --topic.
#
# Which series: for each topic, the one whose base's files (pristine.tsv)
# the torch or tree holds byte for byte, by git blob id, or, once patched,
# whose patched files it holds; the version string only breaks ties. 2.12.1
# gets v2.12.0's series, 2.14.0 v2.14.1's, a +cpu or vendor build the series
# of the release whose files it has; the output says which and why.
#
# Installed wheel (the torch that interpreter PY imports):
#   --python PY          apply the series whose base's files PY's torch holds.
#                        Before writing anything, every file it touches must
#                        match the wheel's RECORD hashes; otherwise it refuses,
#                        names the files and changes nothing. Originals are kept beside the install
#                        (site-packages/.torch-pregrad-backport/, and
#                        .torch-pregrad-backport-<topic>/ for an opt-in topic)
#                        for --revert.
#                        A second apply says "already applied" and exits 0.
#                        2.12.0-2.14.1 have the feature and get their results
#                        fixes; a torch with the feature whose files match no
#                        series here (2.15, a vendor build) is reported and
#                        left alone; one without it whose files match no base
#                        is refused, naming the files that differ. The run
#                        refuses before writing if it could not write every
#                        file (run it as the install's owner).
#   --check              say what would happen; write nothing
#   --status             pristine / patched / partly reverted by hand / patched
#                        without backups / modified / outdated / interrupted /
#                        has the feature / unsupported, for every topic (exit 0
#                        when each is pristine, patched or has the feature; a
#                        topic other than pre-grad-pass-timing with no series
#                        for this release is "not available for this
#                        release", which is fine unless named with --topic)
#   --revert             restore the originals, checked against RECORD again;
#                        also finishes or rolls back an interrupted run
#
# PyTorch checkout or release branch (a git work tree of pytorch/pytorch):
#   CHECKOUT             identify the base by the content of the files the series
#                        touches (their blob hashes, patches/<base>/pristine.tsv),
#                        say which base and why, then `git am -3` the series: one
#                        commit per patch, messages and trailers kept. Refuses,
#                        changing nothing, a dirty tree or index, an am, rebase,
#                        merge, cherry-pick or revert in progress, a directory
#                        that is not a PyTorch checkout, an unknown base, and a
#                        conflict the 3-way merge cannot resolve (it aborts the am
#                        and names the patch, file and line). A second run says
#                        "already applied". A v2.12.0-v2.14.1 tree gets its
#                        results fixes; any other tree with the feature upstream
#                        is reported and left alone. The commits are made one
#                        patch at a time: a run killed in between leaves a clean
#                        tree with part of the series, which the next run
#                        finishes. Each command reads HEAD's history once, and
#                        only down to where the touched files were a base's.
#   --no-commit          stage the changes instead of committing them (every
#                        chosen topic's; topics share no file)
#   --check              apply into a throw-away index: HEAD, index and tree untouched
#   --status             which patches are applied (by patch-id), and whether the
#                        feature is present at HEAD
#   --revert             `git revert` exactly the series' commits, newest first;
#                        refuses, naming the later commits, if they touched the
#                        same lines (HEAD is left where it was)
#
# Overlay (the patched files of a base at their upstream paths, for copying
# into an image or a vendored tree; see overlay/README.md):
#   --overlay BASE       generate overlay/ for BASE (e.g. v2.11.0) from the
#                        pristine release files plus the series. The pristine
#                        files come from PY's torch if --python is given (its
#                        files must be BASE's, pristine or patched by this
#                        script), else from the wheel that `pip download`
#                        fetches (cached). BASE may also be a release without
#                        a series of its own (2.12.1, 2.14.0): each topic then
#                        gets the series whose base's files it holds.
#   --out DIR            write there instead of overlay/
#
# Bases: the directories of patches/ that hold a series file (for a topic
# other than the default: patches/<base>/<topic>/series). Releases served:
# 2.9.0, 2.9.1, 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0, 2.14.1.
# Requirements: bash, git, and Python 3.9 or later for PY (and python3 on PATH
# for CHECKOUT mode and for --overlay without --python).
# Environment: PREGRAD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pregrad-backport)
# holds downloaded wheels.
# Exit codes: 0 done or nothing to do; 1 refused or failed (nothing changed);
# 2 usage error.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cache="${PREGRAD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pregrad-backport}"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
die_usage() { printf 'apply.sh: %s\n(see scripts/apply.sh --help)\n' "$1" >&2; exit 2; }

python="" mode="apply" check="" overlay_base="" out="" checkout="" no_commit=""
topics=()
set_mode() {  # one of --status, --revert, --overlay at most
  [ "$mode" = apply ] || die_usage "--$mode and --$1 do not go together"
  mode="$1"
}
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --python) [ $# -ge 2 ] || die_usage "--python needs an interpreter"; python="$2"; shift 2 ;;
    --check) check="--check"; shift ;;
    --status) set_mode status; shift ;;
    --revert) set_mode revert; shift ;;
    --overlay) [ $# -ge 2 ] || die_usage "--overlay needs a base, e.g. v2.11.0"; set_mode overlay; overlay_base="$2"; shift 2 ;;
    --out) [ $# -ge 2 ] || die_usage "--out needs a directory"; out="$2"; shift 2 ;;
    --no-commit) no_commit="--no-commit"; shift ;;
    --topic) [ $# -ge 2 ] || die_usage "--topic needs a topic name (or all)"; topics+=(--topic "$2"); shift 2 ;;
    -*) die_usage "unknown argument: $1" ;;
    *) [ -z "$checkout" ] || die_usage "one checkout at a time (got $checkout and $1)"
       checkout="$1"; shift ;;
  esac
done

require_python() {  # a Python >= 3.9 that runs, or exit 1 naming it
  local answer
  # Python 2 must be able to parse this line too.
  answer="$("$python" -c 'import sys; print("ok" if sys.version_info >= (3, 9) else "old %d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
  case "$answer" in
    ok) ;;
    old*) echo "apply.sh: $python is Python ${answer#old }; apply.sh needs Python 3.9 or later (torch 2.9 and later need 3.10 anyway)" >&2
          exit 1 ;;
    *) echo "apply.sh: $python is not a Python interpreter that runs here" >&2
       exit 1 ;;
  esac
}

if [ "$mode" = "overlay" ]; then
  [ -z "$check" ] || die_usage "--check does not apply to --overlay"
  [ -z "$checkout" ] || die_usage "--overlay and CHECKOUT do not go together"
  [ -z "$no_commit" ] || die_usage "--no-commit goes with a CHECKOUT"
  args=(overlay --base "$overlay_base" --out "${out:-$repo/overlay}" --cache "$cache" ${topics[@]+"${topics[@]}"})
  if [ -n "$python" ]; then
    require_python
    exec "$python" "$here/pregrad_wheel.py" "${args[@]}" --from-install
  fi
  exec python3 "$here/pregrad_wheel.py" "${args[@]}"
fi

if [ -n "$checkout" ]; then
  [ -z "$python" ] || die_usage "--python and CHECKOUT do not go together"
  [ -z "$out" ] || die_usage "--out goes with --overlay"
  [ -z "$no_commit" ] || [ "$mode" = apply ] || die_usage "--no-commit goes with applying"
  [ -z "$check" ] || [ "$mode" != status ] || die_usage "--status writes nothing; drop --check"
  [ -e "$checkout" ] || { echo "apply.sh: $checkout does not exist" >&2; exit 1; }
  exec python3 "$here/pregrad_checkout.py" "$mode" "$checkout" $check $no_commit ${topics[@]+"${topics[@]}"}
fi
[ -z "$no_commit" ] || die_usage "--no-commit goes with a CHECKOUT"
[ -n "$python" ] || die_usage "say what to patch: --python PY or a CHECKOUT"
[ -z "$out" ] || die_usage "--out goes with --overlay"
require_python
if [ "$mode" = "status" ]; then
  [ -z "$check" ] || die_usage "--status writes nothing; drop --check"
  exec "$python" "$here/pregrad_wheel.py" status ${topics[@]+"${topics[@]}"}
fi
exec "$python" "$here/pregrad_wheel.py" "$mode" $check ${topics[@]+"${topics[@]}"}
