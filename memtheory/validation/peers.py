"""The estimators people use beside memtheory, written out from their published formulas.

None of the peers is installed or imported: each function below is the
formula its source publishes, so that a benchmark or a test can set it beside
memtheory's answer on the same inputs.

==========================  ===========================================================
function                    peer and source
==========================  ===========================================================
:func:`accelerate_peak`     Hugging Face accelerate ``estimate-memory``
                            (``src/accelerate/commands/estimate.py``,
                            ``estimate_training_usage``): "Training using Adam (Peak
                            vRAM)", the largest of its four stages; no activations,
                            batch size 1
:func:`deepspeed_zero2`     DeepSpeed ``estimate_zero2_model_states_mem_needs``
                            (``deepspeed/runtime/zero/stage_1_and_2.py``): per GPU
                            :math:`4P + 16P/N` (offload: :math:`2P`); model states only
:func:`deepspeed_zero3`     DeepSpeed ``estimate_zero3_model_states_mem_needs``
                            (``deepspeed/runtime/zero/stage3.py``): per GPU
                            :math:`4L + 18P/N`, :math:`L` the largest layer's
                            parameters (offload: :math:`4L`); model states only
:func:`per_parameter_rule`  bytes per parameter: 16 (gpu_poor and the ZeRO paper's
                            mixed-precision Adam, 2 + 2 + 12) or 18 (Hugging Face's
                            "Model training anatomy": 6 + 4 + 8 with AdamW)
==========================  ===========================================================

Host bytes use DeepSpeed's 1.5 buffer factor. Every size is in bytes.

Examples
--------
>>> parameters = 1_000_000
>>> accelerate_peak(parameters, "float32") == per_parameter_rule(parameters, 16)
True
>>> deepspeed_zero3(parameters, largest=100_000)[0]
18400000
"""

from __future__ import annotations

from memtheory.errors import InvalidArgumentError

__all__ = [
    "ACCELERATE_DTYPES",
    "accelerate_peak",
    "deepspeed_zero2",
    "deepspeed_zero3",
    "gpu_poor",
    "per_parameter_rule",
]

ACCELERATE_DTYPES = ("float32", "float16", "bfloat16")
"""The dtypes accelerate's ``estimate-memory`` reports a training peak for."""


def _count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"{name} must be a whole number of parameters (>= 0), got {value!r}.")
    return value


def accelerate_peak(parameters: int, dtype: str) -> int:
    """Return accelerate's "Training using Adam (Peak vRAM)" in bytes: its largest stage.

    From the fp32 size :math:`4P`: model, gradients, optimizer (:math:`8P`)
    and step; the step is :math:`16P` in float32 and :math:`8P` in
    float16/bfloat16, so the peak is :math:`16P` and :math:`8P`.

    Parameters
    ----------
    parameters : int
    dtype : {"float32", "float16", "bfloat16"}
        The dtype the model is loaded in.

    Raises
    ------
    InvalidArgumentError
        An unknown dtype or a count that is not a whole number >= 0.

    Examples
    --------
    >>> accelerate_peak(10, "float32"), accelerate_peak(10, "bfloat16")
    (160, 80)
    """
    fp32 = 4 * _count("parameters", parameters)
    if dtype == "float32":
        stages = {"model": fp32, "gradients": fp32, "optimizer": 2 * fp32, "step": 4 * fp32}
    elif dtype in ("float16", "bfloat16"):
        stages = {
            "model": fp32,
            "gradients": fp32 + fp32 // 2,
            "optimizer": 2 * fp32,
            "step": 2 * fp32,
        }
    else:
        raise InvalidArgumentError(
            f"accelerate_peak: dtype must be one of {', '.join(ACCELERATE_DTYPES)}, "
            f"got {dtype!r}.")
    return max(stages.values())


def deepspeed_zero2(parameters: int, gpus: int = 1, *, offload: bool = False) -> tuple[int, int]:
    """Return DeepSpeed's ZeRO-2 model-state estimate: (bytes per GPU, host bytes per node).

    Examples
    --------
    >>> deepspeed_zero2(10), deepspeed_zero2(10, 8), deepspeed_zero2(10, offload=True)
    ((200, 60), (60, 480), (20, 240))
    """
    _count("parameters", parameters)
    if offload:
        return 2 * parameters, int(parameters * max(4 * gpus, 16) * 1.5)
    return 4 * parameters + int(16 * parameters / gpus), int(parameters * 4 * gpus * 1.5)


def deepspeed_zero3(
    parameters: int, largest: int, gpus: int = 1, *, offload: bool = False
) -> tuple[int, int]:
    """Return DeepSpeed's ZeRO-3 model-state estimate (zero_init): (bytes per GPU, host bytes).

    ``largest`` is the most parameters any one module holds itself
    (DeepSpeed's ``largest_layer_params``: ``m.parameters(recurse=False)``).

    Examples
    --------
    >>> deepspeed_zero3(100, 10), deepspeed_zero3(100, 10, offload=True)
    ((1840, 60), (40, 2700))
    """
    _count("parameters", parameters)
    _count("largest", largest)
    if offload:  # optimizer and parameters offloaded
        return 4 * largest, int(parameters * 18 * 1.5)
    return 4 * largest + int(18 * parameters / gpus), int(largest * 4 * gpus * 1.5)


def per_parameter_rule(parameters: int, bytes_per_parameter: int = 16) -> int:
    """Return the rule of thumb: ``bytes_per_parameter`` bytes for every parameter.

    16 is gpu_poor's and the ZeRO paper's mixed-precision Adam (2 bytes of
    weights, 2 of gradients, 12 of fp32 master weights and moments); 18 is
    Hugging Face's "Model training anatomy" for mixed-precision AdamW (6 of
    weights, fp32 and 16-bit, 4 of gradients, 8 of optimizer state). No
    activations in either.

    Examples
    --------
    >>> per_parameter_rule(10), per_parameter_rule(10, 18)
    (160, 180)
    """
    return _count("parameters", parameters) * bytes_per_parameter


def gpu_poor(parameters: int) -> int:
    """Return 16 bytes per parameter (:func:`per_parameter_rule` at 16).

    Examples
    --------
    >>> gpu_poor(10)
    160
    """
    return per_parameter_rule(parameters, 16)
