"""A series applied in memory: each patch applied with `git apply` (no
fuzz) in a scratch repository of its own, and every file it touches checked
against the post-image blob its `index` line names, so a hand-edited patch
that still applies is refused too. Every mode that writes patched files, and
checkout mode's 3-way pre-images, come from here."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Dict, List, Tuple

from torch_backport.infra.errors import Refused
from torch_backport.infra.paths import shown
from torch_backport.infra.git import git_blob_id, init_scratch, write_tree
from torch_backport.patchset.patchfile import Patch
from torch_backport.patchset.series import Series


def apply_series(pristine: Dict[str, bytes], series: Series) -> Dict[str, bytes]:
    """The patched contents: each patch applied with `git apply` (no fuzz), and
    every file it touches checked against the post-image blob of its `index`
    line."""
    versions = apply_each(pristine, series)
    return versions[-1] if versions else dict(pristine)


def apply_each(pristine: Dict[str, bytes], series: Series) -> List[Dict[str, bytes]]:
    """As apply_series, but the contents after each patch, in series order (a
    3-way merge needs every intermediate pre-image)."""
    # A run checks every topic before it writes any, then applies them: the
    # same patches to the same bytes, which git then applies once.
    patches = tuple(series.patches)
    texts = tuple(patch.read_bytes() for patch in patches)
    versions = _apply_each_once(tuple(pristine.items()), patches, texts, series.base)
    return [dict(version) for version in versions]


@functools.lru_cache(maxsize=16)
def _apply_each_once(pristine_items: Tuple[Tuple[str, bytes], ...], patches: Tuple[Patch, ...],
                     texts: Tuple[bytes, ...], base: str
                     ) -> Tuple[Tuple[Tuple[str, bytes], ...], ...]:
    # `texts`, the patches' bytes, are part of the key only: a patch file
    # edited since is applied anew.
    pristine = dict(pristine_items)
    versions: List[Tuple[Tuple[str, bytes], ...]] = []
    with tempfile.TemporaryDirectory(prefix="pregrad-apply-") as tmp:
        # A repository of its own, so git never resolves paths against an
        # enclosing checkout; no one but this process works in it.
        git = init_scratch(Path(tmp), for_people=False)
        write_tree(git, pristine)
        for patch in patches:
            result = git("apply", "--verbose", "--whitespace=nowarn", str(patch.path),
                         check=False)
            if result.returncode != 0:
                errors = [line for line in result.stderr.splitlines()
                          if line.startswith("error:")]
                raise Refused(f"{shown(patch.path)} does not apply to the pristine "
                              f"{base} files:\n  " + "\n  ".join(errors))
            for diff in patch.files:
                blob = git_blob_id((git.repo / diff.path).read_bytes())
                if blob != diff.post_blob:
                    raise Refused(
                        f"{shown(patch.path)}: {diff.path} came out as blob {blob[:12]}, "
                        f"the patch's index line says {diff.post_blob[:12]}: the patch was "
                        "edited or is not whole; nothing was changed")
            versions.append(tuple((rel, (git.repo / rel).read_bytes()) for rel in pristine))
    return tuple(versions)
