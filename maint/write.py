"""What new-base writes: a replayed series staged as patches/v<release>/
holds it (format-patch files whose messages say where they came from,
series, pristine.tsv), checked against the release's files, then moved into
place; the release's patches/releases.tsv row and its patches/candidates.tsv
entry, through torch_backport/infra/tables.py (the tables' one home and their
one version order)."""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import shutil
import tempfile
import textwrap
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from maint.replay import Finished, format_patches
from torch_backport.infra import tables
from torch_backport.infra.paths import shown
from torch_backport.infra.record import sha256_hex
from torch_backport.patchset.apply import apply_series
from torch_backport.infra.git import git_blob_id
from torch_backport.patchset.series import read_series, Series, Store, Topic
from torch_backport.download.release_wheels import ReleaseFiles


def rebased_message(text: str, base: str, release: str, how: str, today: str) -> str:
    """A format-patch file whose message says it was rebased, from which base
    and how; Last-Update is today."""
    head, sep, rest = text.partition("\n---\n")
    head = re.sub(r"^Last-Update: .*$", f"Last-Update: {today}", head, flags=re.MULTILINE)
    body, _, trailers = head.rpartition("\n\n")
    note = "\n".join(textwrap.wrap(
        f"Rebased onto torch {release} from {base}'s series by scripts/new-base ({how}), "
        f"with the pristine {base} files as the merge ancestor; the paragraphs above were "
        f"written for {base}.", width=72, break_on_hyphens=False))
    return f"{body}\n\n{note}\n\n{trailers}\nRebased-From: {base} ({how}){sep}{rest}"


def how_each(hows: List[str], count: int) -> List[str]:
    """How each of `count` written patches went in: as git am -3 took it,
    then by hand from the conflict on."""
    kept = [how for how in hows if not how.startswith("dropped")]
    return [kept[number] if number < len(kept) else "conflict resolved by hand"
            if number == len(kept) else "applied by git am --continue after that"
            for number in range(count)]


def stage_patches(done: Finished, series: Series, release: str, staging: Path) -> List[str]:
    """The replayed commits as patch files in `staging`; their names."""
    out = Path(tempfile.mkdtemp(prefix="pregrad-new-base-fp-"))
    try:
        made = format_patches(done.work, done.release_commit, out)
        today = datetime.date.today().isoformat()
        for path, how in zip(made, how_each(done.hows, len(made))):
            text = rebased_message(path.read_text(), series.base, release, how, today)
            (staging / path.name).write_text(text)
        return [path.name for path in made]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def stage_series(done: Finished, series: Series, files: ReleaseFiles, staging: Path) -> None:
    """patches, series and pristine.tsv of the replayed series, in `staging`."""
    staging.mkdir(parents=True)
    names = stage_patches(done, series, files.version, staging)
    touched = sorted({line.split(" b/", 1)[1] for name in names
                      for line in (staging / name).read_text().splitlines()
                      if line.startswith("diff --git a/")})
    rows = [f"{rel}\t{git_blob_id(files.files[rel])}\t{sha256_hex(files.files[rel])}"
            for rel in touched]
    (staging / "pristine.tsv").write_text(
        f"# Pristine torch v{files.version} files that the series touches, as in the "
        "wheel.\n# path\tgit-blob-sha1\tsha256\n" + "\n".join(rows) + "\n")
    (staging / "series").write_text(
        f"# Series for torch v{files.version}: quilt order, one patch a line, `#` starts a "
        "comment.\n"
        f"# Made by scripts/new-base from {series.base}'s series (3-way merge onto the "
        f"v{files.version} files).\n" + "\n".join(names) + "\n")


def check_post_images(topic: Topic, staging: Path, files: ReleaseFiles) -> None:
    """The staged series applies to the release's files and yields its own
    post-image blobs (apply.apply_series checks them)."""
    shadow = dataclasses.replace(topic, dir=".", store=Store(staging.parent))
    staged = read_series(staging.name, shadow)
    apply_series({rel: files.files[rel] for rel in staged.touched}, staged)


def move_series(patches: Store, release: str, staged: Sequence[Tuple[Topic, Path]]
                ) -> List[str]:
    """Move each staged series into patches/v<release>/, series file last."""
    said: List[str] = []
    target = patches.root / f"v{release}"
    for topic, staging in staged:
        final = target if topic.primary else target / topic.dir
        final.mkdir(parents=True, exist_ok=True)
        for old in final.glob("*.patch"):
            old.unlink()
        names = sorted(p.name for p in staging.iterdir())
        for name in [n for n in names if n != "series"] + ["series"]:
            os.replace(staging / name, final / name)
        said.append(f"wrote {shown(final)}/ ({len(names) - 2} patch(es), series, pristine.tsv)")
    return said


@dataclasses.dataclass(frozen=True)
class Row:
    """The release's releases.tsv row as this run leaves it: the file's new
    text, and the words for it (add/added or replace/replaced, and what)."""
    text: str
    verb: str
    done: str
    what: str


def release_row(patches: Store, release: str, cells: Dict[str, str], default: str) -> Row:
    """releases.tsv with `release`'s row set to `cells` (a topic this run did
    not look at keeps its cell from an earlier row, else `default`)."""
    rows = tables.read_releases(patches.root)
    kept = rows.cells.get(release, {})
    shown_cells = " | ".join(cells.get(name, kept.get(name, default)) for name in rows.topics)
    text = tables.with_release(rows, release, cells, default)
    if release in rows.cells:
        return Row(text, "replace", "replaced",
                   f"the {release} row of {shown(rows.path)}: {shown_cells}")
    return Row(text, "add", "added", f"{release} to {shown(rows.path)}: {shown_cells}")


def candidates_path(patches: Store) -> Path:
    return patches.root / tables.CANDIDATES
