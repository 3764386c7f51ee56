"""PREGRAD_TEST_DEVICE=cuda (scripts/gpu-check.sh) makes every tensor and
module the behaviour and results suites create live on that device, through
torch's default device; unset, they run on the CPU as always."""

import os

import torch

DEVICE = os.environ.get("PREGRAD_TEST_DEVICE", "")
if DEVICE:
    torch.set_default_device(DEVICE)
