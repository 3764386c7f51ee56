"""A shared remote cache: a second machine is served by the first's compiles.

A real redis-server on a loopback port and torch's own remote caches
(TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE, TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE,
TORCHINDUCTOR_REDIS_HOST/PORT). Process A, with an empty local cache
directory, fills Redis; process B, with another empty local cache directory
(another machine), gets the remote hit: under late timing it runs no
pre-grad pass, under early it runs them, and a changed uuid misses.
Without redis-server the tests skip, and fail in the matrix
(PREGRAD_REQUIRE_ALL=1), which installs it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from torch._inductor.test_case import TestCase

from pregrad_passes import child_environment

HERE = Path(__file__).resolve().parent
REDIS_SERVER = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RemoteCacheTests(TestCase):
    def setUp(self) -> None:
        super().setUp()
        if REDIS_SERVER is None and os.environ.get("PREGRAD_REQUIRE_ALL") != "1":
            self.skipTest("needs redis-server (apt-get install redis-server)")
        self.assertIsNotNone(
            REDIS_SERVER, "redis-server is not installed (apt-get install redis-server; "
            "scripts/test.sh installs it when run as root)")
        self.port = free_port()
        self.redis = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(self.stop_redis)
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or self.redis.poll() is not None:
                    raise
                time.sleep(0.1)
        self.client = client

    def stop_redis(self) -> None:
        self.redis.terminate()
        self.redis.wait(timeout=30)

    def machine(self, *scenarios: str) -> list[dict[str, int]]:
        """One compile process with an empty local cache directory of its own."""
        local = tempfile.mkdtemp(prefix="pregrad-machine-")
        self.addCleanup(shutil.rmtree, local, True)
        env = child_environment(
            HERE,
            TORCHINDUCTOR_CACHE_DIR=local,
            TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE="1",
            TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE="1",
            TORCHINDUCTOR_REDIS_HOST="127.0.0.1",
            TORCHINDUCTOR_REDIS_PORT=str(self.port),
        )
        result = subprocess.run([sys.executable, str(HERE / "compile_child.py"), *scenarios],
                                env=env, capture_output=True, text=True, timeout=900)
        self.assertEqual(result.returncode, 0, result.stderr[-4000:])
        return json.loads(result.stdout.splitlines()[-1])

    def test_second_machine_is_served_by_the_remote_cache(self) -> None:
        cold = {"pre_grad_calls": 1, "aot_hit": 0, "aot_miss": 1, "fx_hit": 0, "fx_miss": 1}
        self.assertEqual(self.machine("late:uuid-a:fn", "early:uuid-a:fn_sub"), [cold, cold])
        self.assertGreater(self.client.dbsize(), 0)
        self.assertEqual(
            self.machine("late:uuid-a:fn", "early:uuid-a:fn_sub", "late:uuid-b:fn"),
            [
                # late: the remote hit skips the pre-grad passes
                {"pre_grad_calls": 0, "aot_hit": 1, "aot_miss": 0, "fx_hit": 1, "fx_miss": 0},
                # early: the passes run before the lookup, then it hits
                {"pre_grad_calls": 1, "aot_hit": 1, "aot_miss": 0, "fx_hit": 1, "fx_miss": 0},
                # a changed uuid is another key: a miss, and the passes run
                {"pre_grad_calls": 1, "aot_hit": 0, "aot_miss": 1, "fx_hit": 0, "fx_miss": 1},
            ],
        )
