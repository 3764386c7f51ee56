"""The exit status of every command, named once: apply.sh and torch-backport
(`Exit`), and scripts/new-base --latest's day-one outcomes (`DayOne`). The
help texts list them from here."""

from __future__ import annotations

import enum
import signal


class Exit(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    # --status on a release this project has not seen, with a known defect:
    # not 0 (nothing is fixed), not 1 (nothing is broken in the install either).
    UNSEEN = 3
    INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell reports Ctrl-C


MEANING = {
    Exit.OK: "done or nothing to do",
    Exit.FAILED: "refused or failed (nothing changed)",
    Exit.USAGE: "usage error",
    Exit.UNSEEN: "--status on an unseen release (see --status)",
    Exit.INTERRUPTED: "interrupted (Ctrl-C; --status tells where it stands)",
}


class DayOne(enum.IntEnum):
    """scripts/new-base --latest: besides Exit's 0 (nothing new), 1 (a
    conflict or a failed tier) and 130, what became of a new release."""
    SERVED_CANDIDATE = 3  # its series or row is written and its tier passed
    UPSTREAM_FIXED = 4  # the tier found the stock release's results right


def listed(codes: "dict[Exit, str]") -> str:
    """'Exit codes: 0 done ...; 1 ...' for a help text."""
    return "Exit codes: " + "; ".join(f"{int(code)} {meaning}"
                                      for code, meaning in codes.items()) + "."
