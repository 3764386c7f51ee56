"""The help text of `scripts/apply.sh` and `torch-backport`: the option
table's sections (options.py) between these paragraphs, with the topics and
releases of patches/topics.tsv and patches/releases.tsv filled in."""

from __future__ import annotations

import textwrap
from typing import Dict, Sequence

from torch_backport.infra import exit_codes
from torch_backport.infra.paths import REPO
from torch_backport.options import fill, Section, section, usage

INTRO = """\
Brings torch 2.12's cache-aware pre-grad pass timing
(torch._inductor.config.pre_grad_pass_timing) to a torch that lacks it, by
applying the series in patches/<base>/ to an installed wheel or to a PyTorch
git checkout. docs/usage.md has each mode in full."""

TOPICS = """\
Each topic (patches/topics.tsv) is a series per base, applied, reported and
reverted on its own.
@TOPICS@"""

WHICH_SERIES = """\
Which series: for each topic, the one whose base's files (pristine.tsv)
the torch or tree holds byte for byte, by git blob id, or, once patched,
whose patched files it holds; the version string only breaks ties. 2.12.1
gets v2.12.0's series, 2.14.0 v2.14.1's, a +cpu or vendor build the series
of the release whose files it has; the output says which and why."""

CLOSING = """\
@BASES@
Requirements: git, Python 3.9 or later for PY, and python3 on PATH (it reads
these arguments, and runs CHECKOUT mode and --overlay without --python).
Environment: PREGRAD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pregrad-backport)
holds downloaded wheels (and the venv with PyPA's wheel for --wheel).
@EXIT_CODES@"""

EXIT_CODES = textwrap.fill(exit_codes.listed(exit_codes.MEANING), width=78)

BACKPORT_HELP = """\
Usage: torch-backport apply [ARGS...]
       torch-backport --help | --version

`torch-backport apply ARGS` is scripts/apply.sh ARGS of a clone of
torch-pregrad-backport {version}, installed with its patch series in
  {package}/patches
to patch, check, report on (--status) or revert (--revert) the torch of an
installed wheel, to apply the series to a PyTorch checkout, or to write an
overlay.
`torch-backport apply --help` lists ARGS.

Without --python PY, a CHECKOUT, --overlay or --wheel among ARGS, `apply` adds
  --python {python}
the interpreter this command is installed into, so it patches the torch next
to it. --overlay needs --out DIR: its default, overlay/ beside the scripts,
would be inside site-packages.

Requirements: git (wheel mode applies the patches with `git apply`).
{exit_codes}
A usage error of torch-backport itself exits {usage} too.
"""


def apply_help(prog: str = "scripts/apply.sh",
               modes: Sequence[Section] = tuple(Section)) -> str:
    """The help of `prog` for `modes` (options.sections_for), from the option
    table, with the topics and releases of patches/topics.tsv and
    patches/releases.tsv."""
    filled = table_words()
    parts = ["\n".join(usage(prog)), INTRO]
    for mode in modes:
        lines = section(mode, filled)
        if mode is Section.TOPICS:
            lines[1:1] = fill(TOPICS, filled).splitlines() + [""]
            lines.append("\n" + WHICH_SERIES)
        parts.append("\n".join(lines))
    parts.append(fill(CLOSING, filled))
    text = "\n\n".join(parts) + "\n"
    if prog != "scripts/apply.sh":
        text = installed_paths(text)
    return text


def installed_paths(text: str) -> str:
    """The help as the installed command says it: the docs it cites are in
    the package (REPO is the package there), and the maintainer commands it
    names are a clone's."""
    return (text.replace("docs/usage.md", str(REPO / "docs" / "usage.md"))
            .replace("(scripts/new-base)", "(scripts/new-base, in a clone of this project)"))


def table_words() -> Dict[str, str]:
    """The help's words from patches/topics.tsv and patches/releases.tsv."""
    from torch_backport.patchset import releases
    from torch_backport.infra.errors import Refused
    from torch_backport.patchset.series import fixed_bases, primary_topic
    try:
        primary = primary_topic()
        bases = textwrap.fill(
            "Bases: the directories of patches/ that hold a series file (for a topic "
            "other than the default: patches/<base>/<topic>/series). Releases served: "
            f"{releases.help_releases()}.", width=79, break_on_hyphens=False)
        with_feature = [release.version for release in releases.with_the_feature(primary)]
        return {"@TOPICS@": releases.help_topics(),
                "@WITH_FEATURE@": releases.span(with_feature),
                "@FIXED_BASES@": releases.span(fixed_bases(primary)),
                "@BASES@": bases, "@EXIT_CODES@": EXIT_CODES}
    except (OSError, Refused) as problem:
        # The help still prints: the rest of it is what a user needs to fix this.
        broken = f"(cannot list them: {problem})"
        return {"@TOPICS@": f"  {broken}", "@WITH_FEATURE@": "Releases with a fixes series",
                "@FIXED_BASES@": "release's", "@BASES@": f"Bases: {broken}",
                "@EXIT_CODES@": EXIT_CODES}
