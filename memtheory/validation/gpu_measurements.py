"""Measure the zoo and the reference pairs on a device, and keep the results as a data file.

:func:`record_measurements` runs :func:`~memtheory.validation.compare_with_measurement`
for each model and precision on one device and returns plain data: what ran it
(device, driver, CUDA, PyTorch, memtheory, allocator settings), and per step
the autograd convention's prediction, the measured live storages, the storages
in 512-byte blocks, and on a GPU the caching allocator's allocated and reserved
peaks phase by phase. :func:`write_measurements` saves it as JSON named after
the device and PyTorch version, never over an existing file unless told to;
:func:`load_measurements`, :func:`measurements_table` and :func:`recipes_table`
read it back, as the book's GPU chapter does (``book/data/gpu/``).

On the CPU the same records have no allocator figures; they are how the
recording is tested on machines without a GPU. ``benchmarks/cuda_zoo.py`` is
the command that records on a GPU.

Examples
--------
>>> data = record_measurements("cpu", models=["MLP"], precisions=["fp32"])
>>> data["device"]["type"], len(data["steps"])
('cpu', 1)
>>> step = data["steps"][0]
>>> step["predicted"]["peak"] == step["measured"]["peak"]
True
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from memtheory import __version__
from memtheory.conventions.autograd.torch_version import CHECKED_TORCH_VERSION, same_release
from memtheory.errors import InvalidArgumentError, UnsupportedError
from memtheory.tables import Column, Table
from memtheory.units import format_bytes
from memtheory.validation.accuracy import PRECISIONS, compare_with_measurement
from memtheory.validation.reference_models import PAIRS
from memtheory.validation.zoo import ZOO

__all__ = [
    "FORMAT_VERSION",
    "allocator_peaks",
    "live_peaks",
    "load_measurements",
    "measurements_table",
    "record_measurements",
    "recipes_table",
    "write_measurements",
]

FORMAT_VERSION = 1
"""The layout of the data :func:`record_measurements` returns; bumped when it changes."""

_CATEGORIES = ("saved activations", "peak", "inference peak")


def record_measurements(
    device: str = "cuda",
    *,
    models: Iterable[str] | None = None,
    precisions: Sequence[str] = ("fp32", "bf16", "autocast-bf16"),
    optimizer: str = "adam",
) -> dict[str, Any]:
    """Measure each model at each precision on ``device``; return the results as plain data.

    Parameters
    ----------
    device : str, default "cuda"
        ``"cuda"`` (or ``"cuda:1"``) for a GPU; ``"cpu"`` records the same
        fields with no allocator figures.
    models : iterable of str, optional
        Names in :data:`~memtheory.validation.ZOO` and :data:`~memtheory.validation.PAIRS`;
        all of them by default.
    precisions : sequence of str
        Keys of :data:`memtheory.validation.accuracy.PRECISIONS`.
    optimizer : str, default "adam"

    Returns
    -------
    dict
        ``format``, ``recorded`` (UTC time), ``device`` (type, name, driver,
        CUDA and cuDNN versions, PyTorch and memtheory versions, the
        allocator settings) and ``steps``, one per model and precision.

    Raises
    ------
    InvalidArgumentError
        For an unknown precision, or a GPU this machine does not have.
    """
    names = list(models) if models is not None else [*ZOO, *PAIRS]
    for precision in precisions:
        if precision not in PRECISIONS:
            raise InvalidArgumentError(
                f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}."
            )
    steps = []
    for name in names:
        for precision in precisions:
            comparison = compare_with_measurement(
                name,
                precision=precision,
                optimizer=optimizer,
                conventions=("autograd",),
                device=device,
            )
            steps.append(_step_record(comparison))
    return {
        "format": FORMAT_VERSION,
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": _device_record(device),
        "steps": steps,
    }


def _step_record(comparison: Any) -> dict[str, Any]:
    m = comparison.measurement
    try:
        predicted: dict[str, Any] = {
            category: comparison.predicted("autograd", category) for category in _CATEGORIES
        }
    except UnsupportedError as error:
        predicted = {"refused": str(error)}
    measured = {category: comparison.measured(category) for category in _CATEGORIES}
    measured["block peak"] = m.block_peak
    record: dict[str, Any] = {
        "model": comparison.model,
        "precision": comparison.precision,
        "optimizer": comparison.optimizer,
        "implementation": m.implementation,
        "predicted": predicted,
        "measured": measured,
        "peak moment": m.peak_moment,
        "allocator": None,
    }
    report = m.allocator
    if report is not None:
        record["allocator"] = {
            "peak allocated": report.peak_allocated,
            "peak reserved": report.peak_reserved,
            "peak phase": report.peak_phase,
            "inference peak allocated": report.inference_peak_allocated,
            "inference peak reserved": report.inference_peak_reserved,
            "device in use": report.device_in_use,
            "phases": [asdict(phase) for phase in report.phases],
        }
    return record


def _device_record(device: str) -> dict[str, Any]:
    place = torch.device(device)
    record: dict[str, Any] = {
        "type": place.type,
        "name": platform.processor() or platform.machine(),
        "driver": None,
        "cuda": torch.version.cuda,
        "cudnn": None,
        "torch": torch.__version__,
        "memtheory": _memtheory_version(),
        "allocator settings": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "cudnn benchmark": bool(torch.backends.cudnn.benchmark),
    }
    if place.type == "cuda":
        record["name"] = torch.cuda.get_device_name(place)
        record["cudnn"] = torch.backends.cudnn.version()
        record["driver"] = _driver_version()
        record["memory"] = int(torch.cuda.get_device_properties(place).total_memory)
    return record


def _memtheory_version() -> str:
    return __version__


def _driver_version() -> str | None:
    """Return the NVIDIA driver's version from ``nvidia-smi``, or None where it cannot be asked."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        result = subprocess.run(  # noqa: S603 (a fixed command, no user input)
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip().splitlines()[0] if result.stdout.strip() else None


def write_measurements(data: dict[str, Any], folder: str | Path, *, force: bool = False) -> Path:
    """Write ``data`` as JSON in ``folder``, named after its device, PyTorch version and time.

    The name ends with the recording's date, hour and minute (UTC as recorded), so a second
    recording of the same device and release is kept beside the first, not over it.

    Parameters
    ----------
    data : dict
        What :func:`record_measurements` returned.
    folder : str or Path
        Created if missing.
    force : bool, default False
        Replace a file of the same name; without it an existing file is kept
        and an error says so.

    Returns
    -------
    Path
        The file written.
    """
    if force is not True and force is not False:
        raise InvalidArgumentError(f"force must be True or False, got {force!r}.")
    device = data.get("device") if isinstance(data, dict) else None
    if (
        not isinstance(device, dict)
        or data.get("format") != FORMAT_VERSION
        or not all(isinstance(device.get(key), str) for key in ("name", "torch"))
    ):
        raise InvalidArgumentError(
            "write_measurements() writes what record_measurements() returned: a dict with "
            f"format {FORMAT_VERSION} and a device with its name and PyTorch version."
        )
    recorded = data.get("recorded")
    when = recorded[:16].replace("T", " ").replace(":", "") if isinstance(recorded, str) else ""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{device['name']} torch {device['torch']} {when}".lower())
    path = Path(folder) / f"{slug.strip('-')}.json"
    if path.exists() and not force:
        raise InvalidArgumentError(
            f"{path} exists and is kept; pass force=True (--force) to replace it."
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    except OSError as error:
        raise InvalidArgumentError(
            f"cannot write {path}: {error.strerror or error}. Choose a folder you can write to."
        ) from error
    return path


def load_measurements(folder: str | Path) -> list[dict[str, Any]]:
    """Read every recorded file in ``folder`` (none if it does not exist), by device name.

    Raises
    ------
    InvalidArgumentError
        For a file that is not a recording of this format.
    """
    base = Path(folder)
    if not base.is_dir():
        return []
    recordings = []
    for path in sorted(base.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise InvalidArgumentError(f"{path} is not readable JSON: {error}") from error
        if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
            raise InvalidArgumentError(
                f"{path} is not a measurement file of format {FORMAT_VERSION}; record it again "
                "with benchmarks/cuda_zoo.py."
            )
        recordings.append(data)
    return sorted(recordings, key=lambda data: str(data["device"]["name"]))


def live_peaks(data: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """Return every step's live tensor storages in one recording, keyed to compare recordings.

    The zoo's steps by (model, precision), with what ``measure`` counted; the
    recipes' by (recipe label, size), with their measured peak.

    Examples
    --------
    >>> data = {"steps": [{"model": "MLP", "precision": "fp32", "measured": {"peak": 96}}],
    ...         "recipes": [{"recipe": "hf-trainer", "size": "tiny", "measured_peak": 80}]}
    >>> live_peaks(data)
    {('MLP', 'fp32'): {'peak': 96}, ('hf-trainer', 'tiny'): 80}
    """
    peaks: dict[tuple[str, str], Any] = {
        (step["model"], step["precision"]): step["measured"] for step in data["steps"]}
    for recipe in data.get("recipes", []):
        peaks[(recipe["recipe"], recipe["size"])] = recipe["measured_peak"]
    return peaks


def allocator_peaks(record: dict[str, Any]) -> dict[str, Any] | None:
    """Return a step's caching-allocator figures without those of the whole device.

    The allocated and reserved peaks, phase by phase, of a zoo step or a recipe
    step; left out are the device's name and the driver's figure for memory in
    use on the whole device (the CUDA context and whatever else holds the card),
    so that two GPUs can be compared on what the allocator did. None where no
    allocator was read (a CPU recording).

    Examples
    --------
    >>> allocator_peaks({"allocator": {"device": "cuda:0 (a card)", "peak_allocated": 512,
    ...                                "device_in_use": 2**30}})
    {'peak_allocated': 512}
    """
    report = record.get("allocator")
    if report is None:
        return None
    return {key: value for key, value in report.items()
            if key not in ("device", "device in use", "device_in_use")}


def _size(nbytes: object, unit: str) -> str:
    """Bytes in ``unit`` without the unit, or ``-`` for a figure not recorded."""
    if not isinstance(nbytes, int):
        return "-"
    return format_bytes(nbytes, unit).rsplit(" ", 1)[0]


def _difference(measured: object, predicted: object) -> str:
    """Live less predicted bytes, signed (``0`` when equal), or ``-`` without a prediction."""
    if not isinstance(measured, int) or not isinstance(predicted, int):
        return "-"
    return f"{measured - predicted:+,}" if measured != predicted else "0"


def _version_note(device: dict[str, Any]) -> list[str]:
    """Say when the recording's PyTorch is not the release memtheory's plans were checked on."""
    if same_release(str(device["torch"])):
        return []
    return [
        f"PyTorch {device['torch']} is not {CHECKED_TORCH_VERSION}, the release memtheory's "
        "kernel plans were checked against: a difference may be the version's as well as "
        "the device's kernels'."
    ]


def measurements_table(data: dict[str, Any], unit: str = "MiB") -> Table:
    """Tabulate one recording's steps: predicted and live peaks, their difference, the allocator.

    Per step: the predicted and the live peak, live less predicted in bytes
    (``0`` when exact), the live storages in 512-byte blocks, and the
    caching allocator's allocated and reserved peaks. The notes say which
    device and versions made it, and when its PyTorch is not the one
    memtheory was checked against. The recipes of the recording are
    :func:`recipes_table`'s.

    Examples
    --------
    >>> data = record_measurements("cpu", models=["MLP"], precisions=["fp32"])
    >>> print(measurements_table(data, "KiB"))  # doctest: +ELLIPSIS
    Training steps on ...
    model  precision  predicted peak (KiB)  live peak (KiB)  live - predicted (bytes) ...
    MLP    fp32 ... 0 ...
    """
    rows = []
    for step in data["steps"]:
        allocator = step["allocator"] or {}
        predicted, measured = step["predicted"].get("peak"), step["measured"]["peak"]
        rows.append(
            (
                step["model"],
                step["precision"],
                _size(predicted, unit),
                _size(measured, unit),
                _difference(measured, predicted),
                _size(step["measured"]["block peak"], unit),
                _size(allocator.get("peak allocated"), unit),
                _size(allocator.get("peak reserved"), unit),
            )
        )
    device = data["device"]
    columns = [
        Column("model"),
        Column("precision"),
        Column(f"predicted peak ({unit})", "right"),
        Column(f"live peak ({unit})", "right"),
        Column("live - predicted (bytes)", "right"),
        *(
            Column(f"{title} ({unit})", "right")
            for title in ("in blocks", "allocated", "reserved")
        ),
    ]
    exact = sum(row[4] == "0" for row in rows)
    notes = [
        f"PyTorch {device['torch']}, CUDA {device['cuda']}, driver {device['driver']}; "
        f"recorded {data['recorded']}.",
        *_version_note(device),
        f"live peak equal to the prediction in {exact} of {len(rows)} steps.",
        "predicted: memtheory's autograd convention; live: tensor storages (measure); "
        "in blocks: the same storages in 512-byte blocks; allocated and reserved: the caching "
        "allocator's peaks (none on a CPU).",
    ]
    title = f"Training steps on {device['name']} ({device['type']})"
    return Table(columns, rows, title=title, notes=notes)


def recipes_table(data: dict[str, Any], unit: str = "MiB") -> Table:
    """Tabulate one recording's recipes (``benchmarks/cuda_zoo.py``'s ``recipes`` list).

    Per recipe step (a recipe, a model size, an attention kernel): the
    precision and optimizer implementation it ran, the peak memtheory
    predicted when it was recorded, the live peak, live less predicted in
    bytes, and the caching allocator's allocated and reserved peaks. A
    recording without recipes gives an empty table that says so.

    Examples
    --------
    >>> record = {"recipe": "pytorch-fp32", "size": "tiny", "batch": 2, "sequence": 5,
    ...           "precision": "fp32", "implementation": "for-loop", "predicted_peak": 2048,
    ...           "measured_peak": 2080, "block_peak": 2560, "allocator": None}
    >>> data = {"recorded": "today", "recipes": [record], "device": {
    ...     "name": "a CPU", "type": "cpu", "torch": "2.13.0", "cuda": None, "driver": None}}
    >>> print(recipes_table(data, "KiB"))  # doctest: +ELLIPSIS +NORMALIZE_WHITESPACE
    Recipes on a CPU (cpu)
    recipe        size  batch x sequence  precision  optimizer  predicted peak (KiB) ...
    ------------  ...
    pytorch-fp32  tiny  2 x 5             fp32       for-loop   2.00 ... +32 ...
    """
    rows = []
    for record in data.get("recipes") or []:
        allocator = record.get("allocator") or {}
        predicted, measured = record["predicted_peak"], record["measured_peak"]
        rows.append((
            record["recipe"], record["size"], f"{record['batch']} x {record['sequence']}",
            record["precision"], record["implementation"], _size(predicted, unit),
            _size(measured, unit), _difference(measured, predicted),
            _size(allocator.get("peak_allocated"), unit),
            _size(allocator.get("peak_reserved"), unit),
        ))
    device = data["device"]
    columns = [
        Column("recipe"), Column("size"), Column("batch x sequence"), Column("precision"),
        Column("optimizer"),
        *(Column(f"{title} ({unit})", "right") for title in ("predicted peak", "live peak")),
        Column("live - predicted (bytes)", "right"),
        *(Column(f"{title} ({unit})", "right") for title in ("allocated", "reserved")),
    ]
    exact = sum(row[7] == "0" for row in rows)
    notes = [
        f"PyTorch {device['torch']}, recorded {data['recorded']}.",
        *_version_note(device),
        f"live peak equal to the prediction in {exact} of {len(rows)} recipe steps."
        if rows else "this recording has no recipes.",
        "predicted: memtheory's prediction when the step was recorded; live: tensor storages "
        "(measure); allocated and reserved: the caching allocator's peaks (none on a CPU).",
    ]
    title = f"Recipes on {device['name']} ({device['type']})"
    return Table(columns, rows, title=title, notes=notes)
