"""The shape of the user's training loop: who keeps the model's outputs, and where the loss is.

Two loops that run the same model on the same batch can peak apart by the
size of the logits. ``out = model(**batch); out.loss.backward()`` holds the
whole output (the logits, a decoder's cache) through the backward pass;
``model(**batch).loss.backward()``, which is what Hugging Face's ``Trainer``
runs (its ``compute_loss`` returns the loss alone), frees every output that
no backward node saved as soon as the loss exists. A :class:`Loop` names
which one a result is for: :func:`memtheory.torch.trace` and
:func:`memtheory.torch.measure` take it (``keeps_outputs=``) and print it.
:class:`memtheory.recipes.Setup`'s ``keeps_logits`` is the same choice
(:meth:`Loop.of_setup`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memtheory.errors import InvalidArgumentError

__all__ = ["Loop"]


@dataclass(frozen=True)
class Loop:
    """Which training loop a traced or measured step is: outputs kept or not, loss inside or not.

    Parameters
    ----------
    keeps_outputs : bool, default True
        True: the loop holds the model's output until the step ends (``out =
        model(x); loss_fn(out, y).backward()``). False: only the loss lives
        on (``loss_fn(model(x), y).backward()``, or ``model(**batch).loss``).
    loss_inside : bool, default False
        True when the model computes its own loss (a Hugging Face model given
        ``labels``); False when a loss function is applied to its output.

    Examples
    --------
    >>> print(Loop(keeps_outputs=False, loss_inside=True))
    loss = model(**batch).loss; loss.backward() (outputs freed once the loss exists)
    >>> Loop.of_setup(keeps_logits=False, loss_inside=True) == Loop(False, True)
    True
    """

    keeps_outputs: bool = True
    loss_inside: bool = False

    def __post_init__(self) -> None:
        for name in ("keeps_outputs", "loss_inside"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(
                    f"{name} must be True or False, got {getattr(self, name)!r}."
                )

    @classmethod
    def of_setup(cls, setup: Any = None, *, keeps_logits: bool | None = None,
                 loss_inside: bool = False) -> Loop:
        """Return the loop a :class:`~memtheory.recipes.Setup` (its ``keeps_logits``) describes."""
        if keeps_logits is None:
            keeps_logits = True if setup is None else bool(setup.keeps_logits)
        return cls(keeps_outputs=keeps_logits, loss_inside=loss_inside)

    @property
    def code(self) -> str:
        """The loop in one line of Python."""
        if self.loss_inside:
            return ("out = model(**batch); out.loss.backward()" if self.keeps_outputs else
                    "loss = model(**batch).loss; loss.backward()")
        return ("out = model(x); loss_fn(out, y).backward()" if self.keeps_outputs else
                "loss_fn(model(x), y).backward()")

    def __str__(self) -> str:
        kept = "kept until the step ends" if self.keeps_outputs else "freed once the loss exists"
        return f"{self.code} (outputs {kept})"
