"""The roofline of a training step per registered model: counted FLOPs and estimated HBM bytes on
meta tensors (no memory, no device), against a GPU's peak; prints one JSON object.

    python -m bench.roofline [--gpu H200] [--batch 128] [--models vit_c_1gf,cnn_tiny]

Per model, one AdamW training step at `--batch` on images of the model's own size (1000 classes):
  FLOPs   forward + backward, counted by torch.utils.flop_counter (attention as plain matmuls;
          a grouped convolution's weight gradient divided by its groups, which torch omits);
  bytes   two bounds on what the step moves through HBM, activations in bf16 (what autocast
          computes in), parameters, gradients and AdamW's state in float32:
          no fusion: every op reads its inputs and writes its outputs (the bytes of each tensor
            an op touches, views excluded, attention materialised), plus per parameter autocast's
            bf16 copy and its gradient's float32 cast (12 B) and the fused AdamW update (28 B:
            reads p, g, m, v, writes p, m, v): an upper bound for eager execution;
          ideal fusion: each block's output (a ViT block, a stage's block, the stem, the head)
            written and read once forward and its gradient once backward (4x its bytes), the
            input read once, and per parameter 38 B (bf16 weight read forward and backward, float32
            gradient written, the AdamW update, the next bf16 copy written): a lower bound;
  ceiling images/s = min(peak FLOP/s / FLOPs, bandwidth / bytes) per image, for either bound.
`by_size` lists every size class's models with their ideal-fusion ceiling: the target a class
can reach. Measured images/s sit below the no-fusion ceiling when the host, not the GPU, is the limit.
"""

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from typing import Dict, Iterable, List

import torch
import torch.nn.functional as F
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode

from bench.trainer import H100_BF16_PEAK_TFLOPS
from hpstudy.trainers.models import build_model, set_fused_attention
from hpstudy.trainers.zoo import get_spec, list_models


@dataclass(frozen=True)
class Gpu:
    """A GPU's dense bf16 peak and HBM bandwidth (the vendor's datasheet)."""

    bf16_tflops: float
    hbm_tb_per_s: float


GPUS = {
    "H200": Gpu(H100_BF16_PEAK_TFLOPS, 4.8),  # SXM: the H100's compute, 141 GB of HBM3e
    "H100": Gpu(H100_BF16_PEAK_TFLOPS, 3.35),  # SXM
    "A100": Gpu(312.0, 2.039),  # SXM 80 GB
}
ACTIVATION_DTYPE = torch.bfloat16
NO_FUSION_PARAM_BYTES = 12 + 28  # autocast copy + gradient cast, fused AdamW update (float32)
IDEAL_PARAM_BYTES = 2 + 2 + 4 + 28 + 2  # weight read twice (bf16), gradient written, update, next copy
# ops that allocate without touching memory
NO_TRAFFIC = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}


_TORCH_CONV_BACKWARD = flop_counter.conv_backward_flop.__wrapped__  # torch's formula, on shapes


def conv_backward_flop(*args, out_shape=None, **kwargs) -> int:
    """torch's count of aten.convolution_backward with its weight-gradient term divided by the
    convolution's groups: torch counts a grouped or depthwise convolution's weight gradient as if
    it were dense (RegNetY's backward came out 4.7x its forward instead of about 2x)."""
    groups, (grad_input, grad_weight, _) = args[9], args[10]  # the op's schema: ..., groups, output_mask
    count = lambda mask: _TORCH_CONV_BACKWARD(*args[:10], mask, *args[11:], out_shape=out_shape, **kwargs)
    return count([grad_input, False, False]) + count([False, grad_weight, False]) // groups


def flop_count_mode() -> flop_counter.FlopCounterMode:
    """torch's FLOP counter, grouped convolutions' backward counted right (conv_backward_flop)."""
    return flop_counter.FlopCounterMode(
        display=False, custom_mapping={torch.ops.aten.convolution_backward: conv_backward_flop}
    )


class ByteCounter(TorchDispatchMode):
    """Sums, over the aten ops dispatched inside it, the bytes of the tensors each reads and
    writes (each tensor once per op, at most its storage's size; views and allocations move none)."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.namespace == "aten" and not func.is_view and func.overloadpacket.__name__ not in NO_TRAFFIC:
            tensors = {id(t): t for t in _tensors((args, kwargs, out))}.values()
            self.bytes += sum(min(t.numel() * t.element_size(), t.untyped_storage().nbytes()) for t in tensors)
        return out


def _tensors(tree) -> Iterable[torch.Tensor]:
    if torch.is_tensor(tree):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


def blocks(model: torch.nn.Module) -> List[torch.nn.Module]:
    """The units the ideal-fusion bound keeps whole: the model's children, and the members of those
    that are sequences (a ViT's blocks, a CoAtNet's stages)."""
    units: List[torch.nn.Module] = []
    for child in model.children():
        sequence = isinstance(child, (torch.nn.Sequential, torch.nn.ModuleList)) and len(child)
        units += list(child.children()) if sequence else [child]
    return units


def step_counts(name: str, batch: int, num_classes: int = 1000) -> Dict[str, int]:
    """Counted FLOPs and the two byte bounds of one training step of `name` at `batch`, on meta
    tensors, with the model's parameter count and image size."""
    image_size = get_spec(name).image_size
    with torch.device("meta"):
        model = build_model(name, num_classes, image_size)
    set_fused_attention(model, False)  # the counter sees fused attention on no backend of meta
    model = model.to(ACTIVATION_DTYPE).train()
    params = sum(p.numel() for p in model.parameters())
    boundary = []
    hooks = [b.register_forward_hook(lambda m, i, out: boundary.append(_nbytes(out))) for b in blocks(model)]
    x = torch.zeros(batch, 3, image_size, image_size, dtype=ACTIVATION_DTYPE, device="meta")
    y = torch.zeros(batch, dtype=torch.long, device="meta")
    with flop_count_mode() as flops, ByteCounter() as moved:
        F.cross_entropy(model(x).float(), y).backward()
    for hook in hooks:
        hook.remove()
    return {
        "image_size": image_size,
        "params": params,
        "train_flops": flops.get_total_flops(),
        "bytes_no_fusion": moved.bytes + NO_FUSION_PARAM_BYTES * params,
        "bytes_ideal_fusion": x.numel() * x.element_size() + 4 * sum(boundary) + IDEAL_PARAM_BYTES * params,
    }


def _nbytes(out) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(out))


def roofline(name: str, batch: int, gpu: Gpu) -> dict:
    """One model's FLOPs and bytes per image, arithmetic intensity and ceiling images/s on `gpu`."""
    counts = step_counts(name, batch)
    spec = get_spec(name)
    flops = counts["train_flops"] / batch
    row = {"family": spec.family, "size": spec.size, **counts, "train_flops_per_image": round(flops)}
    compute_limit = gpu.bf16_tflops * 1e12 / flops
    for bound in ("no_fusion", "ideal_fusion"):
        per_image = counts[f"bytes_{bound}"] / batch
        memory_limit = gpu.hbm_tb_per_s * 1e12 / per_image
        row[f"bytes_per_image_{bound}"] = round(per_image)
        row[f"flops_per_byte_{bound}"] = round(flops / per_image, 1)
        row[f"ceiling_images_per_s_{bound}"] = round(min(compute_limit, memory_limit))
        row[f"bound_{bound}"] = "compute" if compute_limit <= memory_limit else "memory"
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="H200", choices=sorted(GPUS))
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--models", help="comma-separated (default: every registered model)")
    args = parser.parse_args(argv)
    names = args.models.split(",") if args.models else list_models()
    unknown = sorted(set(names) - set(list_models()))
    if unknown or args.batch < 1:
        bad = f"--models: unknown {', '.join(unknown)}" if unknown else f"--batch: bad value {args.batch}"
        parser.error(f"{bad}; allowed: registered models ({', '.join(list_models())}), a batch >= 1")
    gpu = GPUS[args.gpu]
    models = {}
    for name in names:
        models[name] = roofline(name, args.batch, gpu)
        print(json.dumps({name: models[name]}), file=sys.stderr, flush=True)
    by_size: Dict[str, Dict[str, int]] = {}
    for name, row in models.items():
        by_size.setdefault(row["size"], {})[name] = row["ceiling_images_per_s_ideal_fusion"]
    print(
        json.dumps(
            {
                "bench": "roofline",
                "gpu": {"name": args.gpu, **asdict(gpu)},
                "batch": args.batch,
                "models": models,
                "by_size": by_size,
            }
        )
    )


if __name__ == "__main__":
    main()
