"""The exceptions memtheory raises, one type per kind of mistake.

Each message names what is wrong (which layer, which value) and how to fix it.
All derive from :class:`MemtheoryError`, and each also derives from the
built-in exception a caller would expect (``ValueError`` for a bad value,
``KeyError`` for an unknown name, ``AttributeError`` for an unknown
attribute), so generic handlers keep working.

Examples
--------
>>> from memtheory import Conv2d
>>> try:
...     Conv2d(32, kernel_size=0)
... except InvalidSizeError as error:
...     print(error)
Conv2d: kernel_size must be a positive integer, got 0. Pass a whole number >= 1.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "DoesNotFitError",
    "EvaluationError",
    "EvaluationOverflowError",
    "InvalidArgumentError",
    "InvalidSizeError",
    "KernelTooLargeError",
    "MemtheoryError",
    "MissingArgumentError",
    "ParseError",
    "RankError",
    "ShapeError",
    "SizeWarning",
    "UnknownAttributeError",
    "UnknownConventionError",
    "UnknownDTypeError",
    "UnknownNameError",
    "UnknownOptimizerError",
    "UnknownPrecisionError",
    "UnknownPresetError",
    "UnknownUnitError",
    "TableError",
    "TraceTimeoutError",
    "UnsupportedError",
    "UntraceableError",
]


class MemtheoryError(Exception):
    """Base class of every error memtheory raises on purpose.

    Examples
    --------
    >>> from memtheory import Dense, Input, Network
    >>> try:
    ...     Network([Input((4, 4)), Dense(0)])
    ... except MemtheoryError as error:
    ...     print(type(error).__name__)
    InvalidSizeError
    """


class InvalidSizeError(MemtheoryError, ValueError):
    """A size or hyperparameter is not a positive whole number (or is out of range)."""


class InvalidArgumentError(MemtheoryError, ValueError):
    """An argument has an acceptable type but a value or state memtheory cannot use.

    For example a PyTorch module left on the GPU, or in evaluation mode, for a
    measurement of a CPU training step.

    Examples
    --------
    >>> from memtheory import format_bytes
    >>> format_bytes(2**20, "MiB", digits=-1)
    Traceback (most recent call last):
    ...
    memtheory.errors.InvalidArgumentError: format_bytes: digits must be a whole number from 0 to 100, got -1.
    """  # noqa: E501 - a doctest's expected output is one line


class ParseError(MemtheoryError, ValueError):
    """A text (a size such as ``"22.9 MiB"``) cannot be read as what it should be."""


class ShapeError(MemtheoryError, ValueError):
    """A layer cannot accept the shape of the tensor that reaches it.

    Examples
    --------
    >>> from memtheory import Conv2d, Input, Network
    >>> issubclass(KernelTooLargeError, ShapeError)
    True
    >>> try:
    ...     Network([Input((3, 2, 2)), Conv2d(8, 5)])
    ... except ShapeError as error:
    ...     print(type(error).__name__)
    KernelTooLargeError
    """


class RankError(ShapeError):
    """A layer got a tensor with the wrong number of dimensions (e.g. Dense after Conv2d)."""


class KernelTooLargeError(ShapeError):
    """A kernel (or pooling window) does not fit in its padded input.

    Examples
    --------
    >>> from memtheory import Input, MaxPool2d, Network
    >>> try:
    ...     Network([Input((3, 2, 2)), MaxPool2d(4)])
    ... except KernelTooLargeError:
    ...     print("the 4x4 window does not fit a 2x2 input")
    the 4x4 window does not fit a 2x2 input
    """


class UnknownNameError(MemtheoryError, KeyError):
    """A name (optimizer, dtype, precision, unit, convention, ...) is not one memtheory knows.

    It is a ``KeyError`` (and so a ``LookupError``), as a failed lookup in a
    mapping is; unlike ``KeyError`` its text is the message itself, unquoted.

    Parameters
    ----------
    message : str
        What is unknown, what is known, and (where a known name is close) "did
        you mean ...?".
    name : object, optional
        The name as it was given.
    known : sequence of str, optional
        The names that are known.
    suggestions : sequence of str, optional
        The known spellings closest to ``name``, best first.

    Examples
    --------
    >>> from memtheory.optimizers import optimizer
    >>> try:
    ...     optimizer("adamm")
    ... except KeyError as error:
    ...     print(error.suggestions[0], "|", error)
    adam | unknown optimizer 'adamm'. Did you mean 'adam'? Known optimizers: sgd, ...
    """

    def __init__(
        self,
        message: str,
        *,
        name: object = None,
        known: Iterable[str] = (),
        suggestions: Iterable[str] = (),
    ) -> None:
        super().__init__(message)
        self.name = name
        self.known = tuple(known)
        self.suggestions = tuple(suggestions)

    __str__ = BaseException.__str__


class UnknownOptimizerError(UnknownNameError):
    """The optimizer name is not in :data:`memtheory.optimizers.OPTIMIZERS`."""


class UnknownDTypeError(UnknownNameError):
    """The dtype name is not in :data:`memtheory.dtypes.DTYPES`."""


class UnknownPrecisionError(UnknownDTypeError):
    """The precision name is not in :data:`memtheory.precision.PRECISIONS`.

    A precision name may be any dtype name, so this is an :class:`UnknownDTypeError` too.
    """


class UnknownUnitError(UnknownNameError):
    """The unit is not one of the byte units in :data:`memtheory.units.UNITS`."""


class UnknownConventionError(UnknownNameError):
    """The accounting convention is not registered."""


class UnknownPresetError(UnknownNameError):
    """The model name is not one of :data:`memtheory.models.PRESETS`."""


class MissingArgumentError(MemtheoryError, TypeError):
    """A required argument was left out (a training step without ``optimizer=``).

    Examples
    --------
    >>> from memtheory import Dense, Input, Network, training_memory
    >>> training_memory(Network([Input((4,)), Dense(2)]))
    Traceback (most recent call last):
    ...
    memtheory.errors.MissingArgumentError: training memory needs an optimizer: ...
    """


# AttributeError and UnknownNameError both declare ``name``; UnknownNameError.__init__ sets it.
class UnknownAttributeError(UnknownNameError, AttributeError):  # type: ignore[misc]
    """An attribute looked up by name does not exist (an exercise parameter, a lazy export)."""


class UnsupportedError(MemtheoryError, TypeError):
    """A model or request uses something memtheory does not model (yet).

    Examples
    --------
    >>> from memtheory import format_bytes
    >>> from memtheory.symbols import B
    >>> try:
    ...     format_bytes(4 * B)
    ... except UnsupportedError:
    ...     print("evaluate the batch first")
    evaluate the batch first
    """


class UntraceableError(UnsupportedError):
    """A model cannot be traced: an operation reads tensor values or has no fake kernel.

    The message names the operation and the module that ran it.
    """


class TraceTimeoutError(UntraceableError):
    """A trace ran past its time budget (a forward that sleeps, waits or loops without end)."""


class DoesNotFitError(MemtheoryError, ValueError):
    """Even the smallest value of a size (a batch of one) does not fit the memory limit.

    Examples
    --------
    >>> from memtheory import max_batch
    >>> from memtheory.symbols import B
    >>> try:
    ...     max_batch(10 * B + 100, "50 B")
    ... except DoesNotFitError:
    ...     print("not even one")
    not even one
    """


class TableError(MemtheoryError, ValueError):
    """A table's rows do not match its columns (a cell too many or too few)."""


class EvaluationError(MemtheoryError, ValueError):
    """Values given to an evaluation do not fit the expression (unknown name, bad value)."""


class EvaluationOverflowError(EvaluationError, OverflowError):
    """An int64 grid evaluation would overflow; use ``dtype=object`` for exact integers."""


class SizeWarning(UserWarning):
    """Values make a network's output size less than 1 inside an expression that is not its.

    An expression built by arithmetic on a network's expressions
    (``adam.total - sgd.total``) is new and carries none of its size
    constraints; when it still contains one of the network's output sizes and
    the values make that size less than 1, memtheory says so instead of staying
    silent. Pass ``within=`` the network to refuse such values instead.
    """
