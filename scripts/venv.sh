#!/usr/bin/env bash
# Usage: scripts/venv.sh VERSION [NAME]
#        scripts/venv.sh VERSION --patched-copy NAME [-- APPLY_ARGS...]
#        scripts/venv.sh --help
#
# Makes sure a virtual environment with torch==VERSION, the test
# requirements (requirements/test.txt), the torchao release that
# test/torchao.tsv pins for VERSION and the torchvision release that
# test/torchvision.tsv pins for it (pip install --no-deps; none where the file
# says "none") exists at $PREGRAD_CACHE/venvs/NAME (NAME defaults to
# torch-VERSION) and prints the path of its python as the last line of
# output. An environment that finished installing is reused; one whose
# install was interrupted is rebuilt; one made with other test requirements
# or another torchao or torchvision pin gets those, keeping its torch (the
# ready stamp names all four). The first install downloads about 4.6 GB (torch and its
# CUDA libraries; they run on the CPU too); pip's cache makes later ones
# local. Files of 1 MB or more that another venv under $PREGRAD_CACHE/venvs
# holds byte for byte are then hard-linked to it (util-linux's hardlink, if
# present): ten releases, with their patched copies, take about 32 GB.
#
# --patched-copy NAME makes sure the stock venv torch-VERSION exists, then
# makes NAME afresh as a hard-linked copy of it (a few MB, under a second)
# and applies the series to the copy with scripts/apply.sh, which replaces
# files by atomic rename: the stock venv keeps its bytes. Arguments after
# `--` go to apply.sh (e.g. `-- --topic pre-grad-pass-timing --topic
# cpu-isa-probe`); without them apply.sh applies the default topics.
#
# Environment: PREGRAD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pregrad-backport),
# PYTHON (default python3): the interpreter the venv is made from.
# Exit codes: 0 ready; 1 install failed; 2 usage error.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/common.sh"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") usage >&2; exit 2 ;;
esac
version="$1"
if [ "${2:-}" = --patched-copy ]; then
  [ $# -eq 3 ] || [ "${4:-}" = -- ] || { usage >&2; exit 2; }
  stock="$("$here/venv.sh" "$version" | tail -n 1)"
  copy="$pregrad_cache/venvs/$3"
  rm -rf "$copy"
  cp -al "$(dirname "$(dirname "$stock")")" "$copy"
  "$here/apply.sh" --python "$copy/bin/python" "${@:5}" >&2
  echo "$copy/bin/python"
  exit 0
fi
name="${2:-torch-$version}"
[ $# -le 2 ] || { usage >&2; exit 2; }

repo="$(dirname "$here")"
cache="$pregrad_cache"
venv="$cache/venvs/$name"
ready="$venv/.pregrad-ready"
requirements="$repo/requirements/test.txt"
# torchao publishes no torch requirement, so pip cannot pick the release that
# works with a torch: test/torchao.tsv names it (release, version or none).
torchao="$(awk -F'\t' -v release="$version" '!/^#/ && $1 == release {print $2}' "$repo/test/torchao.tsv")"
torchao="${torchao:-none}"
# torchvision: the release built for this torch (test/torchvision.tsv says
# which, and what a release without one gets), --no-deps so that it can never
# move torch.
torchvision="$(awk -F'\t' -v release="$version" '!/^#/ && $1 == release {print $2}' "$repo/test/torchvision.tsv")"
torchvision="${torchvision:-none}"
stamp="torch==$version $(sha256sum "$requirements" | cut -d' ' -f1) torchao==$torchao torchvision==$torchvision"

install_pin() {  # install_pin DIST VERSION: the pin, or no DIST at all where it is none
  if [ "$2" != none ]; then
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-deps "$1==$2" >&2
  elif "$venv/bin/python" -m pip show "$1" >/dev/null 2>&1; then
    "$venv/bin/python" -m pip uninstall --disable-pip-version-check -y "$1" >&2
  fi
}
install_pins() { install_pin torchao "$torchao" && install_pin torchvision "$torchvision"; }

# pip's own configuration may cap torch below the release asked for (these
# build machines: /etc/xdg/pip/constraints.txt, torch<=2.14.1, which would
# refuse 2.15.0); a user's machine has no such cap. Every install here pins
# its versions itself, so a configured constraint is lifted for this script's
# pip commands only, and said.
lift_configured_constraint() {
  local configured
  [ -z "${PIP_CONSTRAINT:-}" ] || return 0
  configured="$("${PYTHON:-python3}" -m pip config list 2>/dev/null | sed -n "s/^[a-z]*\.constraint='\(.*\)'$/\1/p" | head -n 1)"
  [ -n "$configured" ] || return 0
  echo "venv: lifting pip's configured constraint $configured ($(grep -v '^#' "$configured" 2>/dev/null | paste -sd' ' -)) for these installs (PIP_CONSTRAINT=/dev/null): torch==$version is pinned here" >&2
  export PIP_CONSTRAINT=/dev/null
}

mkdir -p "$cache/venvs"
exec 9>"$venv.lock"
flock 9  # two runs building the same venv would corrupt it

if [ -f "$ready" ] && [ "$(cat "$ready")" = "$stamp" ]; then
  echo "venv: reusing $venv" >&2
  echo "$venv/bin/python"
  exit 0
fi
if [ -f "$ready" ] && [ "$(cut -d' ' -f1 "$ready")" = "torch==$version" ]; then
  # Same torch, other test requirements or pins: install those, keep the 4.6 GB.
  echo "venv: updating the test requirements, torchao ($torchao) and torchvision ($torchvision) in $venv" >&2
  lift_configured_constraint
  rm -f "$ready"
  if "$venv/bin/python" -m pip install --disable-pip-version-check -r "$requirements" >&2 \
     && install_pins; then
    echo "$stamp" > "$ready"
    echo "$venv/bin/python"
    exit 0
  fi
  echo "venv: updating failed; rebuilding $venv" >&2
fi

started=$SECONDS
lift_configured_constraint
echo "venv: creating $venv (torch==$version)" >&2
rm -rf "$venv"
"${PYTHON:-python3}" -m venv "$venv"
echo "venv: installing torch==$version, the test requirements, torchao ($torchao) and torchvision ($torchvision); the first time downloads ~4.6 GB ..." >&2
# pip prints one line per download; its progress bar shows on a terminal.
if ! "$venv/bin/python" -m pip install --disable-pip-version-check \
      "torch==$version" -r "$requirements" >&2 || ! install_pins; then
  echo "venv: pip failed installing torch==$version into $venv; rerun to retry" >&2
  exit 1
fi
echo "$stamp" > "$ready"
echo "venv: ready after $((SECONDS - started)) s" >&2
# Releases share most of their 4.6 GB (the CUDA libraries), byte for byte:
# one copy on disk. apply.sh replaces files by rename, never in place, so a
# shared file is never changed under another venv.
if command -v hardlink >/dev/null; then
  before="$(du -sm "$cache/venvs" | cut -f1)"
  hardlink --ignore-time --ignore-owner --minimum-size 1M --quiet "$cache/venvs" >&2 \
    || echo "venv: hardlink failed; the venvs keep their own copies" >&2
  echo "venv: hard-linked files shared with other venvs: $before MB -> $(du -sm "$cache/venvs" | cut -f1) MB in $cache/venvs" >&2
else
  echo "venv: util-linux's hardlink is missing, so venvs keep their own copies of shared files" >&2
fi
echo "$venv/bin/python"
