# Sourced by the clone's shell commands (not run): the facts they share with
# torch_backport/, said once. Keep in step with torch_backport/infra/fsio.py's
# cache_dir() and torch_backport/patchset/series.py's primary_topic().

# Where downloaded wheels and the test venvs live.
pregrad_cache="${PREGRAD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pregrad-backport}"

# The original topic (patches/<base>/ itself): the stock/patched switch.
pregrad_primary_topic() {
  awk -F'\t' '!/^#/ && $2 == "." {print $1}' "$(dirname "${BASH_SOURCE[0]}")/../patches/topics.tsv"
}
