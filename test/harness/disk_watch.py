"""The run's lowest free disk space, where the venvs go and where temporary
files go: a full disk fails a job with an OSError somewhere in a long
output, and the closing lines should say how close the run came."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Dict, List, Tuple

GB = 1e9


class DiskWatch:
    """Samples free space every `period` seconds in a daemon thread."""

    def __init__(self, places: List[Path], period: float = 5.0) -> None:
        # One entry per filesystem: the first place named on it.
        self.places: Dict[int, Path] = {}
        for place in places:
            self.places.setdefault(os.stat(existing(place)).st_dev, place)
        self.started = time.monotonic()
        self.at_start = {device: self.free(place) for device, place in self.places.items()}
        self.lowest: Dict[int, Tuple[int, float]] = {
            device: (free, 0.0) for device, free in self.at_start.items()}
        self.period = period
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.sample, name="disk-watch", daemon=True)
        self.thread.start()

    @staticmethod
    def free(place: Path) -> int:
        return shutil.disk_usage(existing(place)).free

    def sample(self) -> None:
        while not self.stopped.wait(self.period):
            for device, place in self.places.items():
                free = self.free(place)
                if free < self.lowest[device][0]:
                    self.lowest[device] = (free, time.monotonic() - self.started)

    def summary(self) -> str:
        self.stopped.set()
        self.thread.join()
        return "; ".join(
            f"{place}: {self.lowest[device][0] / GB:.1f} GB free at the lowest "
            f"({self.lowest[device][1] / 60:.0f} min in), {self.at_start[device] / GB:.1f} "
            "GB at the start" for device, place in self.places.items())


def existing(place: Path) -> Path:
    """The nearest directory that exists: the cache may not yet."""
    while not place.exists() and place != place.parent:
        place = place.parent
    return place
