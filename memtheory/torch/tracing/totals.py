"""Fit a step's totals where its operations change with the sizes (a recurrent loop).

An ``nn.GRU`` (or an LSTM on a path without a fused kernel) runs its cell once
per time step, so a trace at ``S = 12`` runs more operations than one at
``S = 10``: no moment of one trace lines up with a moment of the other, and
:func:`~memtheory.torch.tracing.fit.fitted_trace` cannot fit each moment.
The step's totals still can be: each component, the peak of the step and of
the inference pass, the bytes at the step's start, each module's saved bytes
and output sizes are numbers at every size, and :class:`TotalsLayout` lets
the fit find (and confirm, at two sizes it did not use) their polynomials. The
timeline then holds the peak of each phase (zero_grad, forward, loss, backward,
optimizer step), labelled with the moment of that peak at the example sizes.
Which moment is a phase's peak changes below the fit's sizes, so the fit
claims only the sizes :mod:`~memtheory.torch.tracing.region` checked.
"""

from __future__ import annotations

from fractions import Fraction

import sympy as sp

from memtheory.errors import UnsupportedError
from memtheory.max_pruning import maximum
from memtheory.torch.tracing.layout import MomentLayout, fitted_expression, record_number
from memtheory.torch.tracing.result import ModuleRow, TracedMemory
from memtheory.torch.tracing.step import StepRecord

__all__ = ["TotalsLayout"]


class TotalsLayout(MomentLayout):
    """The numbers of a concrete trace that do not depend on its operations lining up."""

    def __init__(self, reference: StepRecord) -> None:
        super().__init__(reference)
        if reference.workspaces:
            raise UnsupportedError(
                "the step runs other operations at other sizes and keeps oneDNN's LSTM "
                "workspace, whose size rounds to pages: its totals are no polynomial to fit. "
                "Turn oneDNN's RNN off around both the trace and the real training (with "
                "torch.backends.mkldnn.flags(enabled=False): ...), or measure the model at the "
                "sizes you need with memtheory.torch.measure."
            )
        self.phases = list(dict.fromkeys(_phase(label) for label, _ in reference.moments))
        peaks = _phase_peaks(reference)
        self.labels = [peaks[phase][1] for phase in self.phases]

    def names(self) -> list[str]:
        """Name what each position of a vector holds."""
        return [
            *(f"component {c}" for c in self.components),
            *(f"the peak of phase {p}" for p in self.phases),
            "the inference peak",
            "the step's start",
            *(f"saved bytes of {r.path}" for r in self.modules),
            *(
                f"output size {i} of {r.path}"
                for r, n in zip(self.modules, self.shapes, strict=True)
                for i in range(n)
            ),
        ]

    def vector(self, record: StepRecord) -> list[int]:
        """Return the totals of ``record`` in :meth:`names` order."""
        records = {r.path: r for r in record.watch.records.values()}
        missing = [r.path for r in self.modules if r.path not in records]
        peaks = _phase_peaks(record)
        missing += [f"phase {p}" for p in self.phases if p not in peaks]
        if missing or list(peaks) != self.phases or not record.inference:
            raise UnsupportedError(
                "at another size the step runs other modules or phases "
                f"({', '.join(missing[:3])}), so no single formula describes it. Measure it at "
                "the sizes you need with "
                "memtheory.torch.measure."
            )
        excluded = record.not_activations
        shapes: list[int] = []
        for r, count in zip(self.modules, self.shapes, strict=True):
            shape = records[r.path].output_shape or ()
            if len(shape) != count:
                raise UnsupportedError(
                    f"the output of {r.path} has {len(shape)} dimensions at one size and {count} "
                    "at another, so no single formula describes it. Measure it at the sizes you "
                    "need with memtheory.torch.measure."
                )
            shapes.extend(int(size) for size in shape)
        return [
            *(record_number(record.components.get(c, {})) for c in self.components),
            *(peaks[p][0] for p in self.phases),
            max(record_number(m) for _, m in record.inference),
            record_number(record.moments[0][1]),
            *(record_number(records[r.path].saved_bytes(excluded)) for r in self.modules),
            *shapes,
        ]

    def result(
        self, coefficients: list[list[Fraction]], monomials: list[sp.Expr], words: tuple[str, ...]
    ) -> TracedMemory:
        """Build the traced memory from the fitted coefficients, in :meth:`names` order."""
        built = iter([fitted_expression(c, monomials) for c in coefficients])
        components = {name: next(built) for name in self.components}
        timeline = {label: next(built) for label in self.labels}
        inference, start = next(built), next(built)
        saved = [next(built) for _ in self.modules]
        rows = tuple(
            ModuleRow(
                r.path,
                r.kind,
                r.depth,
                tuple(next(built) for _ in range(n)) if r.output_shape is not None else None,
                r.parameters,
                s,
            )
            for r, s, n in zip(self.modules, saved, self.shapes, strict=True)
        )
        return TracedMemory(
            components={name: value for name, value in components.items() if value != 0},
            timeline=timeline,
            inference_peak=maximum([inference]),
            step_start=start,
            conditions=words,
            modules=rows,
            method="fitted",
        )


_PHASES = ("zero_grad", "forward", "loss", "backward", "optimizer step", "step start")


def _phase(label: str) -> str:
    """Return the phase a moment's label starts with (``"forward h.0: aten.mm"``: forward)."""
    return next((p for p in _PHASES if label.startswith(p)), label.split(":")[0])


def _phase_peaks(record: StepRecord) -> dict[str, tuple[int, str]]:
    """Each phase's most bytes and the first moment that reached them, in the order they ran."""
    peaks: dict[str, tuple[int, str]] = {}
    for label, moment in record.moments:
        phase, value = _phase(label), record_number(moment)
        if phase not in peaks or value > peaks[phase][0]:
            peaks[phase] = (value, label)
    return peaks
