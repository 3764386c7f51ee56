"""torch-pregrad-backport: the series of patches/ applied to an installed
torch wheel, a PyTorch checkout or an overlay. `scripts/apply.sh` (a clone)
and `torch-backport apply` (installed) enter through torch_backport.cli;
docs/architecture.md maps the modules."""

__version__ = "0.3.0"
