"""torchvision models with random weights and trained-like BatchNorms.

Straight from its constructor a BatchNorm is near identity (running mean 0,
variance 1, weight 1, bias 0), which hides most of what folding it wrongly
does. `make_real_model` therefore gives each BatchNorm what a trained network
holds: weight and bias drawn around 1 and 0, and running statistics
measured on the model's own input: one forward with only the BatchNorms in
train mode (a cumulative average; dropout and stochastic depth stay off, so
each BatchNorm sees what it sees in eval). Nothing is downloaded: weights=None.
"""

from __future__ import annotations

import torch

# name -> input shape: small images keep a CPU compile to seconds; every model
# has plain Conv2d -> BatchNorm2d pairs (what fuse_conv_bn folds). A batch of
# two, and 128 pixels where a model reaches its last BatchNorms at 2x2 from 64:
# running statistics of a handful of values blow the output up.
REAL_MODELS = {
    "resnet18": (2, 3, 64, 64),
    "resnet50": (2, 3, 64, 64),
    "mobilenet_v3_small": (2, 3, 64, 64),
    "efficientnet_b0": (2, 3, 128, 128),
    "densenet121": (2, 3, 64, 64),
}
# Small nets of the other convolutions fuse_conv_bn folds (Conv1d -> BatchNorm1d
# as in speech front ends, Conv3d -> BatchNorm3d as in video models): built
# here, seconds to compile. name -> input shape.
SMALL_NETS = {
    "conv1d_speech": (2, 40, 100),
    "conv3d_video": (1, 3, 8, 24, 24),
}
# Folding BatchNorms changes rounding; outputs are of magnitude 1-10 and the
# defect is off by 1 or more.
TOLERANCE = {"atol": 5e-4, "rtol": 5e-4}


def torchvision_missing() -> str | None:
    """Why the real models cannot run here (test/torchvision.tsv), or None."""
    try:
        import torchvision  # noqa: F401
    except ImportError as error:
        return (f"torchvision is not importable ({error}); test/torchvision.tsv names the "
                "release scripts/venv.sh installs for each torch, or why none")
    except RuntimeError as error:
        # A torchvision whose C++ extension does not load in this torch build
        # (PyPI's CUDA torchvision beside a +cpu torch) fails its import while
        # registering fake kernels for ops that were never defined.
        from importlib.metadata import version

        return (f"torchvision {version('torchvision')} does not import with torch "
                f"{torch.__version__} ({error}): its C++ extension is not built for this "
                "torch build, and the index has none that is (test/torchvision.tsv)")
    return None


def set_trained_like_batchnorms(model: torch.nn.Module, example: torch.Tensor) -> None:
    """BatchNorm weight ~ U(0.5, 1.5), bias ~ N(0, 0.2), running statistics
    from `example` (a cumulative average over one forward)."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for norm in norms:
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_(0.0, 0.2)
            norm.reset_running_stats()
            norm.momentum = None
        model.eval()
        for norm in norms:
            norm.train()
        model(example)
        model.eval()


def small_net(name: str) -> torch.nn.Module:
    """SMALL_NETS's `name`: three conv -> BatchNorm blocks, ReLU between."""
    from torch import nn

    conv, norm = {"conv1d_speech": (nn.Conv1d, nn.BatchNorm1d),
                  "conv3d_video": (nn.Conv3d, nn.BatchNorm3d)}[name]
    width = SMALL_NETS[name][1]
    return nn.Sequential(conv(width, 32, 3, padding=1), norm(32), nn.ReLU(),
                         conv(32, 32, 3, padding=1), norm(32), nn.ReLU(),
                         conv(32, 16, 1), norm(16))


def make_real_model(name: str, seed: int = 0,
                    batch: int | None = None) -> tuple[torch.nn.Module, torch.Tensor]:
    """torchvision's `name` (random weights, trained-like BatchNorms, eval
    mode) and an input for it (REAL_MODELS's shape, or `batch` images)."""
    torch.manual_seed(seed)
    shape = REAL_MODELS.get(name) or SMALL_NETS[name]
    if batch is not None:
        shape = (batch, *shape[1:])
    if name in SMALL_NETS:
        model = small_net(name)
    else:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None)
    set_trained_like_batchnorms(model, torch.randn(*shape))
    return model, torch.randn(*shape)


def compile_with_freezing(entry: str, model: torch.nn.Module, x: torch.Tensor,
                          **config: object) -> torch.Tensor:
    """One compile for inference with freezing (and `config`), run on `x`:
    entry "compile_fx" hands Inductor the symbolic_trace'd module (its convs
    stay modules, as fx-based pipelines pass them), "inductor_compile" hands
    it to torch._inductor.compile (the public wrapper of compile_fx),
    "torch_compile" goes through Dynamo (which lifts the parameters)."""
    from torch._inductor import config as inductor_config
    from torch._inductor.compile_fx import compile_fx

    torch._dynamo.reset()
    with torch.no_grad(), inductor_config.patch({"freezing": True, **config}):
        if entry == "compile_fx":
            out = compile_fx(torch.fx.symbolic_trace(model), [x])(x)
        elif entry == "inductor_compile":
            out = torch._inductor.compile(torch.fx.symbolic_trace(model), [x])(x)
        else:
            out = torch.compile(model)(x)
    return out[0] if isinstance(out, (list, tuple)) else out


def max_abs_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual - expected).abs().max())
