"""torch-pregrad-backport as an installable command: `torch-backport apply`
runs the installed copy of scripts/apply.sh (see torch_backport.cli)."""

__version__ = "0.2.0"
