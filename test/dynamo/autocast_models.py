"""Functions and modules with autocast regions, shared by test_autocast_cache.py
and its child process (autocast_child.py)."""

from __future__ import annotations

import torch
from torch._dynamo.utils import counters


def matmul_in_region(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An autocast region that leaves its dtype to the ambient setting."""
    with torch.autocast(device_type="cpu"):
        return a @ b


def matmul_relu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """No autocast region of its own: callers may wrap it in one."""
    return (a @ b).relu()


class RotaryStyle(torch.nn.Module):
    """A float32 island, as HF transformers' rotary embeddings force one."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type="cpu", enabled=False):
            y = self.fc(x.float()).sin()
        return y * 2


def aot_counts() -> dict[str, int]:
    return {
        "hit": counters["aot_autograd"]["autograd_cache_hit"],
        "miss": counters["aot_autograd"]["autograd_cache_miss"],
        "bypass": counters["aot_autograd"]["autograd_cache_bypass"],
    }


def operands() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(32, 32, generator=generator),
            torch.randn(32, 32, generator=generator))
