"""The clone's maintainer tools: serving a new torch release (new_base.py
and its modules), checking the series (check_patches.py) and the README
table made from patches/*.tsv (update_docs.py). scripts/new-base,
scripts/check-patches and scripts/update-docs run them. Not shipped:
setup.cfg's packages are torch_backport and its patches, so an installed
copy has none of this; they read and write a clone's patches/ through the
package (torch_backport.patchset.series, infra.tables, installed.pristine,
download.release_wheels, infra.git); code that only they use lives here.."""
