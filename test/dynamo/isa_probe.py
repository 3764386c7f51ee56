"""Inductor's CPU vector-ISA probe, skipped or real.

The tests that are not about the probe, and their child processes, take the
ISAs /proc/cpuinfo lists as working (TORCHINDUCTOR_VEC_ISA_OK=1, Inductor's
own knob, read by every release) instead of dry-compiling a library per ISA
and loading it in a child: on stock 2.9-2.12 each child imports torch, 8-11 s
a process. Inductor still runs the AVX-512 BF16 and AMX sub-probes where the
CPU lists them; the knob does not cover those. test_cpu_isa_probe.py runs the
real probe (`real_probe()`) and checks that its answer is the one the knob
gives on this machine, so the kernels the other tests compile are the same.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

VARIABLE = "TORCHINDUCTOR_VEC_ISA_OK"
SKIP_ISA_PROBE = {VARIABLE: "1"}


def forget_probe_answers() -> None:
    """Empty what holds the probe's answers: the functools caches of the
    module (valid_vec_isa_list) and of each ISA class (__bool__ and its
    helpers), and what a sub-probe set on an ISA object
    (`_is_avx512_bf16_supported`, `_is_amx_fp16_supported`), whichever a
    release has. A sub-probe's answer left set changes the arch flags, and so
    the key, of the next probe's test library."""
    from torch._inductor import cpu_vec_isa

    for value in list(vars(cpu_vec_isa).values()):
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()
        if isinstance(value, type) and issubclass(value, cpu_vec_isa.VecISA):
            for attribute in vars(value).values():
                if callable(getattr(attribute, "cache_clear", None)):
                    attribute.cache_clear()
        for isa in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(isa, cpu_vec_isa.VecISA):
                for name in [name for name in vars(isa)
                             if name.startswith("_is_") and name.endswith("_supported")]:
                    delattr(isa, name)


@contextlib.contextmanager
def real_probe() -> Iterator[None]:
    """Inductor's real probe in this process and in the children started
    meanwhile; the knob and empty caches again after."""
    from torch._inductor import config

    saved = os.environ.pop(VARIABLE, None)
    try:
        with config.patch({"cpp.vec_isa_ok": None}):
            forget_probe_answers()
            yield
    finally:
        if saved is not None:
            os.environ[VARIABLE] = saved
        forget_probe_answers()
