"""Small CPU inference modules whose compiled results are compared with eager.

The table modules are the cases of the results issue: a conv -> BatchNorm
block (folded by Inductor's pre-grad `fuse_conv_bn` under freezing), two of
them around an `nn.Identity` (`remove_identity`), a linear layer with an
identity, and one conv module called twice, once before a BatchNorm and once
not. `StackModel` builds random stacks of the same pieces for the hypothesis
property. Every BatchNorm gets non-trivial running statistics, so folding it
wrongly (or not at all) changes the numbers by far more than the tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

CHANNELS = 4
SIDE = 6


def randomize_batchnorms(model: nn.Module) -> nn.Module:
    """Eval mode, with running stats and affine parameters far from identity."""
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-1.0, 1.0)
            module.running_var.uniform_(0.5, 2.0)
            module.weight.data.uniform_(0.5, 2.0)
            module.bias.data.uniform_(-1.0, 1.0)
    return model.eval()


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, CHANNELS, 3)
        self.bn = nn.BatchNorm2d(CHANNELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


class TwoConvBNWithIdentity(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, CHANNELS, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(CHANNELS)
        self.identity = nn.Identity()
        self.conv2 = nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(CHANNELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.identity(torch.relu(self.bn1(self.conv1(x))))
        return self.bn2(self.conv2(x))


class LinearIdentity(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(SIDE, SIDE)
        self.identity = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.identity(self.linear(x)))


class SharedConv(nn.Module):
    """One conv module, called before a BatchNorm and on its own."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, CHANNELS, 3)
        self.bn = nn.BatchNorm2d(CHANNELS)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.bn(self.conv(x)), self.conv(y)


def image(seed: int) -> torch.Tensor:
    # Drawn on the CPU (the seeded generator's device), then moved to the
    # default device (PREGRAD_TEST_DEVICE, see conftest.py).
    cpu = torch.randn(2, 3, SIDE, SIDE, generator=torch.Generator().manual_seed(seed),
                      device="cpu")
    return cpu.to(torch.get_default_device())


# name -> (module factory, example inputs)
TABLE_MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "conv_bn": (ConvBN, lambda: (image(1),)),
    "two_conv_bn_identity": (TwoConvBNWithIdentity, lambda: (image(2),)),
    "linear_identity": (LinearIdentity, lambda: (image(3),)),
    "shared_conv": (SharedConv, lambda: (image(4), image(5))),
}


def make_table_model(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    factory, inputs = TABLE_MODELS[name]
    torch.manual_seed(0)
    return randomize_batchnorms(factory()), inputs()


# The pieces of a random stack. Every piece maps [N, CHANNELS, SIDE, SIDE] to
# the same shape, so any sequence of them is a valid module.
PIECES = ("conv", "bn", "conv_bn", "linear", "identity", "relu", "add", "cat",
          "shared_conv", "shared_conv_bn")


class StackModel(nn.Module):
    """A stem conv (3 -> CHANNELS), then `pieces` in order. "add" is a residual
    through a new conv; "cat" concatenates a conv branch and folds it back with
    a 1x1 conv; "shared_conv" calls one conv module that every such piece
    shares, and "shared_conv_bn" calls it followed by a BatchNorm of its own:
    a stack with both is the case that fuse_conv_bn must not fold."""

    def __init__(self, pieces: Sequence[str]) -> None:
        super().__init__()
        self.pieces = list(pieces)
        self.stem = nn.Conv2d(3, CHANNELS, 3, padding=1)
        self.shared = nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1)
        self.layers = nn.ModuleList()
        for piece in self.pieces:
            if piece in ("conv", "add"):
                layer: nn.Module = nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1)
            elif piece in ("bn", "shared_conv_bn"):
                layer = nn.BatchNorm2d(CHANNELS)
            elif piece == "conv_bn":
                layer = nn.Sequential(
                    nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1), nn.BatchNorm2d(CHANNELS))
            elif piece == "linear":
                layer = nn.Linear(SIDE, SIDE)
            elif piece == "identity":
                layer = nn.Identity()
            elif piece in ("relu", "shared_conv"):
                layer = nn.ReLU()
            elif piece == "cat":
                layer = nn.ModuleList([nn.Conv2d(CHANNELS, CHANNELS, 3, padding=1),
                                       nn.Conv2d(2 * CHANNELS, CHANNELS, 1)])
            else:
                raise ValueError(f"unknown piece {piece!r}")
            self.layers.append(layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for piece, layer in zip(self.pieces, self.layers):
            if piece == "add":
                x = x + layer(x)
            elif piece == "cat":
                branch, fold = layer
                x = fold(torch.cat([branch(x), x], dim=1))
            elif piece == "shared_conv":
                x = layer(self.shared(x))
            elif piece == "shared_conv_bn":
                x = layer(self.shared(x))
            else:
                x = layer(x)
        return x

    def extra_repr(self) -> str:
        return repr(self.pieces)


def make_stack_model(pieces: Sequence[str], seed: int) -> tuple[nn.Module, tuple[Any, ...]]:
    torch.manual_seed(seed)
    return randomize_batchnorms(StackModel(pieces)), (image(seed),)
