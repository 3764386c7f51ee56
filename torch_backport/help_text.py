"""The help text of `scripts/apply.sh` and `torch-backport`, with the topics
and releases of patches/topics.tsv and patches/releases.tsv filled in."""

from __future__ import annotations

import textwrap

APPLY_HELP = """\
Usage: scripts/apply.sh --python PY [--topic T]... [--check | --status [--expect patched] | --revert [--check]]
       scripts/apply.sh --python PY --verify [--topic T]...
       scripts/apply.sh --python PY --verify --model MODULE:FACTORY
       scripts/apply.sh CHECKOUT [--topic T]... [--check | --no-commit | --status | --revert [--check]]
       scripts/apply.sh --overlay BASE [--topic T]... [--python PY] [--out DIR]
       scripts/apply.sh --wheel IN --out DIR [--topic T]... [--check]
       scripts/apply.sh --help

Brings torch 2.12's cache-aware pre-grad pass timing
(torch._inductor.config.pre_grad_pass_timing) to a torch that lacks it, by
applying the series in patches/<base>/ to an installed wheel or to a PyTorch
git checkout.

Topics (patches/topics.tsv): each topic is a series per base, applied,
reported and reverted on its own.
@TOPICS@
  --topic T            act on topic T (repeat it, or T1,T2; `all` is every
                       topic, `default` the default ones, so
                       `default,cpu-isa-probe` adds the opt-in topic to
                       them). An unknown name is a usage error (exit 2),
                       wherever it appears. Without it apply, --revert and
                       --overlay act on the default topics, and --status
                       reports every topic. A default topic other than
                       pre-grad-pass-timing that has no series for a release
                       is reported as not available and left alone, unless
                       named with --topic.

Which series: for each topic, the one whose base's files (pristine.tsv)
the torch or tree holds byte for byte, by git blob id, or, once patched,
whose patched files it holds; the version string only breaks ties. 2.12.1
gets v2.12.0's series, 2.14.0 v2.14.1's, a +cpu or vendor build the series
of the release whose files it has; the output says which and why.

Installed wheel (the torch that interpreter PY imports):
  --python PY          apply the series whose base's files PY's torch holds.
                       Before writing anything, every file it touches must
                       match the wheel's RECORD hashes; otherwise it refuses,
                       names the files and changes nothing. Originals are kept beside the install
                       (site-packages/.torch-pregrad-backport/, and
                       .torch-pregrad-backport-<topic>/ for an opt-in topic)
                       for --revert.
                       A second apply says "already applied" and exits 0.
                       @WITH_FEATURE@ have the feature and get their results
                       fixes; a torch with the feature whose files match no
                       series here (a vendor build) is reported and
                       left alone, unless the results defect is known on the
                       releases around it: then it is "unseen" (a release
                       this project has not seen: 2.16.0 before a series
                       exists for it), refused with what is known and what
                       to do (scripts/new-base). One without the feature
                       whose files match no base
                       is refused, naming the files that differ. The run
                       refuses before writing if it could not write every
                       file (run it as the install's owner).
  --check              say what would happen; write nothing
  --status             pristine / patched / partly reverted by hand / patched
                       without backups / modified / outdated / interrupted /
                       has the feature / unseen / unsupported, for every
                       topic (exit 0 when each is pristine, patched or has
                       the feature; 3 when a topic is unseen: a release with
                       the feature, no series here and the results defect
                       known on the releases around it; a topic other than
                       pre-grad-pass-timing with no series for this release
                       is "not available for this release", which is fine
                       unless named with --topic)
  --expect patched     with --status, the guard for images and CI: exit 1
                       unless every default topic is applied (by apply.sh or
                       a patched wheel) or upstream's. A stock install, an
                       unseen release and a reinstall that put the stock
                       files back all fail it.
  --revert             restore the originals, checked against RECORD again;
                       also finishes or rolls back an interrupted run
  --verify             proof from the code that runs, where --status proves
                       the files: in a fresh process of PY, with an Inductor
                       cache of its own (removed at the end) and no bytecode
                       written, run what each default topic (or each --topic)
                       promises and print one line per cell, expected beside
                       actual: conv->BN with freezing through compile_fx and
                       torch._inductor.compile against eager, a conv shared by
                       a BatchNorm and another use, a warm compile that hits
                       the AOTAutogradCache and runs 0 pre-grad passes, and a
                       float16 compile after a bfloat16 one under autocast. A
                       cell that does not hold is named with its defect and
                       what to do. Exit 0 only if every cell holds, on any
                       install, stock included. About 15-25 s on 2 CPU cores
                       (it takes the vector ISAs /proc/cpuinfo lists, Inductor's
                       TORCHINDUCTOR_VEC_ISA_OK=1, instead of the 8-11 s
                       probe). Writes nothing into site-packages. Needs a C++
                       compiler (Inductor's CPU backend); without one it says
                       what to install.
  --model MODULE:FACTORY
                       with --verify: your own model. FACTORY, a function in
                       MODULE (a module name found from the current directory,
                       or a .py file), returns (model, example_inputs). Under
                       torch.no_grad() with freezing, the model goes through
                       compile_fx(torch.fx.symbolic_trace(m)),
                       torch._inductor.compile(symbolic_trace(m)),
                       compile_fx(torch.export.export(m).module()), AOTInductor
                       (aoti_compile_and_package, then aoti_load_package) and
                       torch.compile(m); one row each with the max abs error
                       against eager. Exit 1 if one is further from eager than
                       1e-3 of max(1, max |output|) (float32), or raised; an
                       entry point the model cannot go through (no trace, no
                       export) says so and is not a failure. Compiles as in
                       production (the ISA probe included): about 30 s for a
                       small model, AOTInductor most of it. Exit 1 also
                       without a C++ compiler or Python's C headers (it says
                       which package to install).

PyTorch checkout or release branch (a git work tree of pytorch/pytorch):
  CHECKOUT             identify the base by the content of the files the series
                       touches (their blob hashes, patches/<base>/pristine.tsv),
                       say which base and why, then `git am -3` the series: one
                       commit per patch, messages and trailers kept. Refuses,
                       changing nothing, a dirty tree or index, an am, rebase,
                       merge, cherry-pick or revert in progress, a directory
                       that is not a PyTorch checkout, an unknown base, and a
                       conflict the 3-way merge cannot resolve (it aborts the am
                       and names the patch, file and line). A second run says
                       "already applied". A @FIXED_BASES@ tree gets its
                       results fixes; any other tree with the feature upstream
                       is reported and left alone. The commits are made one
                       patch at a time: a run killed in between leaves a clean
                       tree with part of the series, which the next run
                       finishes. Each command reads HEAD's history once, and
                       only down to where the touched files were a base's.
  --no-commit          stage the changes instead of committing them (every
                       chosen topic's; topics share no file)
  --check              apply into a throw-away index: HEAD, index and tree untouched
  --status             which patches are applied (by patch-id), and whether the
                       feature is present at HEAD
  --revert             `git revert` exactly the series' commits, newest first;
                       refuses, naming the later commits, if they touched the
                       same lines (HEAD is left where it was)

Patched wheel (a torch wheel with the series in it, to pin by hash):
  --wheel IN           IN is a torch wheel file, or torch==X for the release
                       wheel (downloaded once into the cache). Checks every
                       file of IN against its RECORD, applies each topic's
                       series (chosen by content, post-image blobs checked, as
                       on an install), and writes to DIR the same wheel with
                       version X+pregrad.g<10 hex> (a PEP 440 local label that
                       names the series; torch==X requirements accept it), a
                       new RECORD and dist-info name, and the same bytes every
                       time. A refused IN (a file that does not match RECORD,
                       a release without a series, not a torch wheel) writes
                       nothing. An install made from it shows as "installed
                       from a patched wheel" in --status. Needs PyPA's wheel
                       and packaging: without them in python3, they are
                       installed once into a venv in the cache.
  --out DIR            where the wheel goes (required)
  --lock FILE          with --wheel: also write FILE, a requirements file
                       for pip install --require-hashes: every dependency of
                       torch==X as pip resolves it now (name==version and the
                       sha256 of the file pip would install, from pip install
                       --dry-run --report), and the patched wheel by its
                       path and sha256 in torch's place. It is for the Python
                       and platform running this command.
  --platform TAG       with --wheel torch==X: build for this wheel platform tag
                       (repeat it; e.g. manylinux_2_28_aarch64, macosx_15_0_arm64,
                       win_amd64), each target's release wheel downloaded once
                       into the cache, and write DIR/simple/, a PEP 503 index
                       of every patched torch wheel in DIR (relative links with
                       sha256) for pip --index-url file://DIR/simple, pip
                       --find-links DIR or a uv [[tool.uv.index]]. A target the
                       index has no wheel for is named (exit 1)
  --python-version V   with --platform: for CPython V (repeat it; default
                       3.10, 3.11, 3.12 and 3.13)
  --all-platforms      every Linux x86_64 and aarch64, macOS arm64 and
                       Windows amd64 wheel of CPython 3.10-3.13 the release
                       has (the combinations it lacks are named, exit 0)
  --check              check IN and the series; write nothing

Overlay (the patched files of a base at their upstream paths, for copying
into an image or a vendored tree; see overlay/README.md):
  --overlay BASE       generate overlay/ for BASE (e.g. v2.11.0) from the
                       pristine release files plus the series. The pristine
                       files come from PY's torch if --python is given (its
                       files must be BASE's, pristine or patched by this
                       script), else from the release wheel on pip's
                       index, read by HTTP range (a few MB; the whole wheel
                       where the index serves no ranges, cached). BASE may
                       also be a release without
                       a series of its own (2.12.1, 2.14.0): each topic then
                       gets the series whose base's files it holds.
  --out DIR            write there instead of overlay/

@BASES@
Requirements: git, Python 3.9 or later for PY, and python3 on PATH (it reads
these arguments, and runs CHECKOUT mode and --overlay without --python).
Environment: PREGRAD_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pregrad-backport)
holds downloaded wheels (and the venv with PyPA's wheel for --wheel).
Exit codes: 0 done or nothing to do; 1 refused or failed (nothing changed);
2 usage error; 3 --status on an unseen release (see --status); 130
interrupted (Ctrl-C; --status tells where it stands).
"""  # noqa: E501  (the help is printed as written)

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
Exit codes: apply.sh's (0 done or nothing to do; 1 refused or failed; 2 usage
error; 130 interrupted); 2 for a usage error of torch-backport itself.
"""


def apply_help() -> str:
    """APPLY_HELP with the topics and releases of patches/topics.tsv and
    patches/releases.tsv."""
    from torch_backport import releases
    from torch_backport.errors import Refused
    from torch_backport.series import fixed_bases, primary_topic
    try:
        primary = primary_topic()
        bases = textwrap.fill(
            "Bases: the directories of patches/ that hold a series file (for a topic "
            "other than the default: patches/<base>/<topic>/series). Releases served: "
            f"{releases.help_releases()}.", width=79, break_on_hyphens=False)
        with_feature = [release.version for release in releases.with_the_feature(primary)]
        made = {"@TOPICS@": releases.help_topics(),
                "@WITH_FEATURE@": releases.span(with_feature),
                "@FIXED_BASES@": releases.span(fixed_bases(primary)),
                "@BASES@": bases}
    except (OSError, Refused) as problem:
        # The help still prints: the rest of it is what a user needs to fix this.
        broken = f"(cannot list them: {problem})"
        made = {"@TOPICS@": f"  {broken}", "@WITH_FEATURE@": "Releases with a fixes series",
                "@FIXED_BASES@": "release's", "@BASES@": f"Bases: {broken}"}
    text = APPLY_HELP
    for marker, value in made.items():
        text = text.replace(marker, value)
    return text
