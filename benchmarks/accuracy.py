"""How accurate is each convention? Predicted vs measured bytes of real PyTorch training steps.

Two sets of models: the zoo (:data:`memtheory.validation.ZOO`: the StackExchange CNN,
an MLP, a VGG-style stack, the forum thread's net scaled down; sequential,
converted with ``from_module``) and the reference pairs
(:data:`memtheory.validation.PAIRS`: ResNet-18/50-, MobileNetV2-, ViT-, BERT-MLM- and
GPT-2-style modules with explicit ``forward()``, each beside its memtheory
builder's network at small sizes nobody tuned for). For every model, every
precision (fp32; bf16 as ``model.to(torch.bfloat16)``, which every convention
can express; fp32 weights under ``torch.autocast(bfloat16)``, which the rule of
thumb and the breakdown can only write as ``mixed-bf16``) and SGD, SGD with
momentum and Adam (PyTorch's default for-loop implementation on CPU), it
measures one steady-state training step on CPU (:func:`memtheory.torch.measure`:
live tensor storages) and prints, per convention (rule of thumb, breakdown,
autograd), predicted and measured saved activations and peak live bytes in MiB
(2^20 bytes) with the relative error in %, and the error on weights, gradients
and optimizer state together; the book's table adds the peak of one inference
pass (eval mode under ``no_grad``). A convention that refuses a network (the autograd
convention on layers whose autograd behaviour is not yet checked against
PyTorch) shows ``refused`` and its reason instead of a number.

First it prints the table chapter 11 of the book shows (fp32, Adam, one row per
convention per reference pair); then the whole grid. The bar for the autograd
convention, checked at the end on every step it does not refuse: saved
activations within 1% and the training-step peak within 5% (on PyTorch 2.13
it is exact). Run with ``make bench`` or ``python benchmarks/accuracy.py``
(``--book`` prints the book's table only); needs the torch extra
(``pip install "memtheory[torch]"``).
"""

from __future__ import annotations

import itertools
import sys
import time


def main(argv: list[str]) -> int:
    """Measure, predict, print the tables and whether the autograd convention meets the bar."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: benchmarks/accuracy.py needs PyTorch (pip install 'memtheory[torch]').")
        return 0
    from memtheory.validation import PAIRS, ZOO, accuracy_table, compare_with_measurement
    from memtheory.validation.accuracy import OPTIMIZERS, PRECISIONS

    print(
        f"torch {torch.__version__}, CPU; sizes in MiB (2^20 bytes); error = (pred - meas) / meas"
    )
    start = time.perf_counter()
    book = [compare_with_measurement(name, precision="fp32", optimizer="adam") for name in PAIRS]
    print("\nThe book's table (chapter 11): reference pairs, fp32, Adam")
    print(accuracy_table(book, categories=("saved activations", "peak", "inference peak")))
    print(f"{len(book)} measured steps in {time.perf_counter() - start:.1f} s")
    if "--book" in argv:
        return 0

    start = time.perf_counter()
    comparisons = [
        compare_with_measurement(model, precision=precision, optimizer=optimizer)
        for model, precision, optimizer in itertools.product([*ZOO, *PAIRS], PRECISIONS, OPTIMIZERS)
    ]
    elapsed = time.perf_counter() - start
    print("\nEvery model, precision and optimizer")
    print(accuracy_table(comparisons))
    predicted = [c for c in comparisons if "autograd" not in c.refused]
    refused = sorted({c.model for c in comparisons if "autograd" in c.refused})
    worst_saved = max(abs(c.error("autograd", "saved activations")) for c in predicted)
    worst_peak = max(abs(c.error("autograd", "peak")) for c in predicted)
    inference = predicted  # a convention refusing the inference peak refuses the network
    worst_inference = max(abs(c.error("autograd", "inference peak")) for c in inference)
    exact = sum(
        c.predicted("autograd", k) == c.measured(k)
        for c in predicted
        for k in ("saved activations", "peak")
    )
    exact_inference = sum(
        c.predicted("autograd", "inference peak") == c.measured("inference peak")
        for c in inference
    )
    ok = worst_saved <= 0.01 and worst_peak <= 0.05
    print(
        f"\nautograd convention, worst |error| over the {len(predicted)} steps it predicts: saved "
        f"activations {worst_saved:.4%} (bar 1%), peak {worst_peak:.4%} (bar 5%): "
        f"{'met' if ok else 'MISSED'}; {exact} of {2 * len(predicted)} exact to the byte"
    )
    print(
        f"inference peak (eval, no_grad), worst |error| over {len(inference)} steps: "
        f"{worst_inference:.4%}; {exact_inference} of {len(inference)} exact to the byte"
    )
    print(f"refused by the autograd convention: {', '.join(refused) or 'none'}")
    print(f"{len(comparisons)} measured steps in {elapsed:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
