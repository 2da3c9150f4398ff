"""memtheory beside the estimators people use, on the same inputs, and against measurement.

Each peer is written out from its published formula in
:mod:`memtheory.validation.peers` (none of them is installed or imported):

* **accelerate** ``estimate-memory`` (Hugging Face accelerate,
  ``src/accelerate/commands/estimate.py``, ``estimate_training_usage``; the
  "Model Memory Calculator" space shows the same numbers): from the model's
  fp32 size :math:`4P` it lists the training stages (model, gradients,
  optimizer, step) and reports their maximum as "Training using Adam (Peak
  vRAM)": :math:`16P` bytes in float32 and :math:`8P` in float16/bfloat16.
  No activations; batch size 1 assumed.
* **DeepSpeed** ``estimate_zero2_model_states_mem_needs`` and
  ``estimate_zero3_model_states_mem_needs`` (``deepspeed/runtime/zero/stage_1_and_2.py``
  and ``stage3.py``; the "Memory Requirements" page of DeepSpeed's docs), per
  GPU: ZeRO-2 :math:`4P + 16P/N` (offload: :math:`2P`), ZeRO-3
  :math:`4L + 18P/N` with :math:`L` the largest layer's parameters (offload of
  optimizer and parameters: :math:`4L`); host RAM with a 1.5 buffer factor.
  Model states only.
* **gpu_poor-style**: 16 bytes per parameter for full fine-tuning with Adam in
  mixed precision (2 weights + 2 gradients + 12 fp32 master and moments), the
  rule the gpu_poor calculator and many blog posts start from; no activations.

Part 1 runs the small reference pairs (:data:`memtheory.validation.PAIRS`,
fp32 Adam) and a LoRA twin on CPU and compares every estimate with the peak
:func:`memtheory.torch.measure` records (live tensor storages, exact). Part 2
shows larger models where nothing is measured (GPU sizes; no GPU here): the
estimates side by side, per device. Sizes in MiB / GiB (2^20 / 2^30 bytes).
Run ``python benchmarks/peers.py``; part 1 needs the torch extra.
"""

from __future__ import annotations

import sys
import time

from memtheory.tables import Column, Table
from memtheory.validation.peers import (
    accelerate_peak,
    deepspeed_zero2,
    deepspeed_zero3,
    gpu_poor,
)


def _mib(value: float) -> str:
    return f"{float(value) / 2**20:,.2f}"


def _gib(value: float) -> str:
    return f"{float(value) / 2**30:,.2f}"


def _error(predicted: float, measured: float) -> str:
    return f"{(float(predicted) - measured) / measured:+.0%}"


def measured_rows() -> list[tuple[str, ...]] | None:
    """The reference pairs and a LoRA twin: every estimate against the measured peak."""
    try:
        import torch
    except ImportError:
        return None
    from torch import nn

    from memtheory import Dense, Input, Network, ReLU
    from memtheory.finetuning import LoRA, finetune_memory
    from memtheory.layers import CrossEntropyLoss
    from memtheory.torch import measure
    from memtheory.validation import PAIRS, compare_with_measurement

    rows = []
    for name, pair in PAIRS.items():
        c = compare_with_measurement(name, precision="fp32", optimizer="adam")
        network = pair.build_network()
        p = int(network.parameter_count)
        largest = max(int(row.parameters) for row in network.rows)
        measured = c.measured("peak")
        estimates = {
            "memtheory autograd": c.predicted("autograd", "peak"),
            "memtheory breakdown": c.predicted("breakdown", "peak"),
            "accelerate": accelerate_peak(p, "float32"),
            "DeepSpeed ZeRO-3 (1 GPU)": deepspeed_zero3(p, largest)[0],
            "16 B/param": gpu_poor(p),
        }
        rows += _compare(name, p, measured, estimates)

    class LoRALinear(nn.Module):
        def __init__(self, n_in: int, n_out: int, rank: int) -> None:
            super().__init__()
            self.base_layer = nn.Linear(n_in, n_out).requires_grad_(False)
            self.lora_A = nn.Linear(n_in, rank, bias=False)
            self.lora_B = nn.Linear(rank, n_out, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.base_layer(x) + self.lora_B(self.lora_A(x)) * 2.0

    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), LoRALinear(512, 512, 8),
                           nn.Linear(512, 10))
    module[0].requires_grad_(False)
    module[3].requires_grad_(False)
    x, y = torch.randn(16, 256), torch.randint(0, 10, (16,))
    trainable = [q for q in module.parameters() if q.requires_grad]
    m = measure(module, x, nn.CrossEntropyLoss(), torch.optim.Adam(trainable), target=y)
    net = Network([Input((256,), batch=16), Dense(512, name="fc1"), ReLU(),
                   Dense(512, name="fc2"), Dense(10, name="fc3"), CrossEntropyLoss()])
    lora = finetune_memory(net, lora=LoRA(8, 16, targets="fc2"), optimizer="adam",
                           precision="fp32", convention="autograd")
    p = int(sum(q.numel() for q in module.parameters()))
    estimates = {
        "memtheory autograd": lora.peak,
        "accelerate": accelerate_peak(p, "float32"),
        "16 B/param": gpu_poor(p),
    }
    rows += _compare("MLP with LoRA r=8 (frozen base)", p, m.peak, estimates)
    return rows


def _compare(
    name: str, parameters: int, measured: int, estimates: dict[str, int]
) -> list[tuple[str, ...]]:
    rows = [(name, f"{parameters:,}", "measured (CPU)", _mib(measured), "")]
    for label, value in estimates.items():
        rows.append(("", "", label, _mib(value), _error(value, measured)))
    return rows


def gpu_rows() -> list[tuple[str, ...]]:
    """Larger models per GPU, where nothing is measured here: the estimates side by side."""
    from memtheory.estimate import estimate
    from memtheory.estimate.resolve import resolve_model

    rows: list[tuple[str, ...]] = []
    settings = [
        ("gpt2-xl", "1 GPU, mixed bf16, batch 1 x 1024", {}),
        ("gpt2-xl", "8 GPUs, ZeRO-2", {"gpus": 8, "zero": 2}),
        ("gpt2-xl", "8 GPUs, ZeRO-3", {"gpus": 8, "zero": 3}),
        ("gpt2-xl", "8 GPUs, ZeRO-3 + offload", {"gpus": 8, "zero": 3,
                                                  "offload": "optimizer+parameters"}),
        ("gpt2-xl", "1 GPU, LoRA r=16", {"lora": 16}),
        ("gpt2-xl", "1 GPU, QLoRA r=64, paged 8-bit", {"qlora": True,
                                                        "optimizer": "paged-adamw-8bit"}),
    ]
    network = resolve_model("gpt2-xl", batch=1, sequence=1024).network
    p = int(network.parameter_count)
    largest = max(int(row.parameters) for row in network.rows)
    for model, label, options in settings:
        # DeepSpeed's and accelerate's formulas assume mixed precision with an fp32 master copy
        # (16 bytes a parameter): the same precision here, not estimate's autocast default
        precision = None if "lora" in options or "qlora" in options else "mixed-bf16"
        answer = estimate(model, batch=1, sequence=1024, flash=True, precision=precision,
                          **options)  # type: ignore[arg-type]
        gpus = int(options.get("gpus", 1))
        zero = int(options.get("zero", 0))
        offload = options.get("offload", "none") != "none"
        if zero == 3:
            deepspeed = deepspeed_zero3(p, largest, gpus, offload=offload)[0]
        elif zero == 2:
            deepspeed = deepspeed_zero2(p, gpus, offload=offload)[0]
        else:
            deepspeed = None
        states = sum(
            int(v) for k, v in answer.memory.components.items()
            if k not in ("activations", "activation_gradients", "input")
        )
        peers = "n/a (no LoRA)" if "lora" in options or "qlora" in options else None
        rows.append((
            f"{model} ({p:,})", label, _gib(answer.peak), _gib(states),
            peers or _gib(accelerate_peak(p, "bfloat16")) if gpus == 1 else "n/a (1 GPU only)",
            "n/a" if deepspeed is None else _gib(deepspeed),
            peers or (_gib(gpu_poor(p) / gpus) if zero == 3 else _gib(gpu_poor(p))),
        ))
    return rows


def main(argv: list[str]) -> int:
    """Print both tables."""
    start = time.perf_counter()
    measured = measured_rows()
    if measured is None:
        print("part 1 skipped: measuring needs PyTorch (pip install 'memtheory[torch]').")
    else:
        print("Part 1: small models measured on CPU (PyTorch, fp32, Adam); peak live bytes, MiB")
        columns = [Column("model"), Column("parameters", "right"), Column("estimate"),
                   Column("MiB", "right"), Column("error", "right")]
        print(Table(columns, measured))
    print(
        "\nPart 2: GPT-2 XL per GPU at batch 1, sequence 1024, flash attention; GiB. Not "
        "measured: the peers count model states only (no activations), memtheory adds them."
    )
    columns = [Column("model"), Column("setting"), Column("memtheory", "right"),
               Column("memtheory states", "right"), Column("accelerate", "right"),
               Column("DeepSpeed", "right"), Column("16 B/param", "right")]
    print(Table(columns, gpu_rows()))
    print(f"\n{time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
