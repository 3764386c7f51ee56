"""The kernels the matrix keeps between runs (test/dynamo/kept_kernels.py):
a second process of the same key compiles no C++, and one whose key changed
finds nothing and compiles afresh. Each process is real: stock torch 2.11.0
compiles one function with Inductor, and a wrapper around CppBuilder.build
counts the compiles into the cache directory (Inductor calls it only for an
output it does not have)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fake_install import REPO, ScratchTestCase

sys.path.insert(0, str(REPO / "test" / "dynamo"))
from kept_kernels import KeyInputs, publish, seed, STORE_VARIABLE  # noqa: E402

CHILD = """
import json, shutil
import torch
from torch._inductor import cpp_builder
from compile_caches import fresh_compile_caches, make_process_cache_dir
from compile_caches import publish_to_store, seed_from_store
from kept_kernels import key_inputs

root = make_process_cache_dir()
seed_from_store(root)
compiles = []
build = cpp_builder.CppBuilder.build
def counted(self, *args, **kwargs):
    # Inductor preprocesses cpp_prefix.h in a temporary directory in every
    # process, to hash it: not a compile of anything kept.
    if self.get_target_file_path().startswith(str(root)):
        compiles.append(self.get_target_file_path())
    return build(self, *args, **kwargs)
cpp_builder.CppBuilder.build = counted
with fresh_compile_caches():
    x = torch.randn(64)
    torch.testing.assert_close(torch.compile(lambda x: torch.sin(x) * 2 + 1)(x),
                               torch.sin(x) * 2 + 1)
publish_to_store(root)
shutil.rmtree(root)
print(json.dumps({"compiles": len(compiles), "key": key_inputs().key()}))
"""


@pytest.mark.usefixtures("stock_python")
class KeptKernelsTest(ScratchTestCase):
    def compile_once(self, python: str) -> dict:
        env = {**os.environ, STORE_VARIABLE: str(self.tmp / "store"),
               "PYTHONPATH": str(REPO / "test" / "dynamo"), "TORCHINDUCTOR_VEC_ISA_OK": "1"}
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
        ran = subprocess.run([python, "-c", CHILD], capture_output=True, text=True, env=env,
                             timeout=600)
        self.assertEqual(ran.returncode, 0, ran.stderr[-3000:])
        return json.loads(ran.stdout.splitlines()[-1])

    def test_same_key_compiles_nothing_and_a_changed_key_compiles_afresh(self) -> None:
        from fake_install import source_python, STOCK

        python = source_python(STOCK)
        first = self.compile_once(python)
        self.assertGreater(first["compiles"], 0)
        second = self.compile_once(python)
        self.assertEqual(second, {"compiles": 0, "key": first["key"]})
        # What a changed key finds: the kernels kept under another key only.
        store = self.tmp / "store"
        (store / first["key"]).rename(store / ("0" * len(first["key"])))
        third = self.compile_once(python)
        self.assertEqual(third, first)
        self.assertEqual(sorted(path.name for path in store.iterdir()), [first["key"]])


class KeyTest(ScratchTestCase):
    def test_each_input_changes_the_key(self) -> None:
        inputs = KeyInputs(interpreter="/venv/bin/python\n3.11.7", compiler="/usr/bin/g++\n12.2",
                           cpu_flags="avx2 avx512f", torch_files="ab" * 32)
        changed = [KeyInputs(**{**vars(inputs), name: value + "'"})
                   for name, value in vars(inputs).items()]
        keys = {inputs.key(), *(other.key() for other in changed)}
        self.assertEqual(len(keys), 1 + len(changed))


class StoreTrustTest(ScratchTestCase):
    """A kernel is code Inductor loads: a store that others may write to is
    not read from (nor written to)."""

    def published_store(self) -> tuple[Path, Path]:
        live = self.tmp / "live"
        (live / "ab").mkdir(parents=True)
        (live / "ab" / "cab.so").write_bytes(b"kernel")
        store = self.tmp / "kernels" / "torch-x" / "key"
        self.assertEqual(publish(live, store), 1)
        return live, store

    def test_a_store_made_here_is_this_users_alone_and_seeds(self) -> None:
        _, store = self.published_store()
        for directory in (store.parent, store, store / "ab"):
            self.assertEqual(directory.stat().st_mode & 0o777, 0o700, directory)
        fresh = self.tmp / "fresh"
        fresh.mkdir()
        self.assertEqual(seed(fresh, store), 1)
        self.assertEqual((fresh / "ab" / "cab.so").read_bytes(), b"kernel")

    def test_the_isa_probes_load_marks_are_never_kept(self) -> None:
        """`<library>.load_ok` tells torch 2.14+'s probe to start no child:
        kept, it would hide the children the probe tests count."""
        live = self.tmp / "live"
        (live / "ab").mkdir(parents=True)
        (live / "ab" / "cab.so").write_bytes(b"library")
        (live / "ab" / "cab.so.load_ok").write_bytes(b"")
        store = self.tmp / "kernels" / "torch-x" / "key"
        self.assertEqual(publish(live, store), 1)
        self.assertEqual(sorted(path.name for path in (store / "ab").iterdir()), ["cab.so"])

    def test_a_store_others_may_write_to_is_ignored(self) -> None:
        for directory in ("parent", "key", "kernel directory"):
            with self.subTest(directory):
                live, store = self.published_store()
                loose = {"parent": store.parent, "key": store,
                         "kernel directory": store / "ab"}[directory]
                loose.chmod(0o777)
                fresh = self.tmp / "fresh"
                fresh.mkdir()
                self.assertEqual(seed(fresh, store), 0)
                self.assertEqual(list(fresh.iterdir()), [])
                self.assertEqual(publish(live, store), 0)
                for made in (live, fresh, self.tmp / "kernels"):
                    shutil.rmtree(made)
