"""The sizes a network cannot go below, carried with the expressions it hands out.

A layer's output size is an expression such as ``H - 4`` (a 5x5 kernel) or
``floor(H/2) - 2`` (then a 2x2 pooling). For ``H = 2`` it is negative, and a
formula that squares it (``64*B*(H - 4)**2``) would turn an impossible network
into a plausible number of bytes. So every output size that is not positive for
every admissible value of its symbols becomes a :class:`SizeConstraint`: it must
be at least 1, and every evaluation path of memtheory checks it.

How a constraint travels
------------------------
The expressions stay plain sympy expressions: they print, compare, simplify
and grade exactly as before. The constraints travel beside them:

* **with the results, first.** A memory result keeps its network's constraints
  (:attr:`~memtheory.footprint.Footprint.constraints`) and checks exactly those
  in its ``evaluate`` and ``grid``, whatever any other network registered; the
  what-if solvers given a memory result, a network or counts use its own, and
  start their search at the smallest size every layer takes.
* **explicitly.** Every evaluation function takes ``within=`` (a network, a
  memory result, or constraints): those constraints are checked.
* **with the expressions memtheory hands out.** A network's totals
  (``parameter_count``, ``activation_count``, ...), the counts it gives a
  convention, and every component, ``total`` and ``peak`` of a memory result
  built from it are registered with its constraints (:func:`carry`), one set
  per network: two networks can hand out one expression (the same layers under
  two names, or different layers whose counts coincide) and each keeps its own.
  :func:`~memtheory.evaluation.evaluate`,
  :func:`~memtheory.evaluation.evaluate_grid` and
  :func:`~memtheory.evaluation.compile_exact` of a bare expression look them up
  (:func:`candidates`). Known to one network, or to several that need the same
  sizes: its constraints are checked. Known to several that need different
  sizes: values every one of them refuses are refused, values only some refuse
  give a :class:`~memtheory.errors.SizeWarning` saying its constraints are
  unknown, and never is one network's range used silently for another's
  expression. What :func:`~memtheory.evaluation.evaluate` returns while
  symbols stay free carries each network's constraints still open.
* **as a warning.** An expression *you* build from others
  (``4 * net.activation_count + 1``) is new, and carries nothing (beyond a
  rational factor: ``total / 2**20`` carries what ``total`` carries). If it
  still contains one of a network's output sizes (:func:`register_sizes`), and
  the values make that size less than 1, evaluating it gives a
  :class:`~memtheory.errors.SizeWarning` naming the layer, not silence: it may
  be a formula of your own, so it is not refused. Pass ``within=net`` to refuse,
  or evaluate the memory results and combine the numbers. (A size that sympy
  has merged into other terms, as with a fixed batch and one symbolic side, is
  beyond finding in a new expression: there only ``within=`` checks it.)

Most constraints are lower bounds (a window must fit). A model's limit is an
upper bound: a learned table of 1,024 positions takes no longer sequence
(:data:`MODEL_LIMIT`); evaluating past it is refused, and the what-if solvers
stop there. The input batch does not depend on the layers, so it carries
nothing.

Examples
--------
>>> from memtheory import Conv2d, Input, Network
>>> from memtheory.evaluation import evaluate
>>> from memtheory.symbols import B, H
>>> net = Network([Input((1, H, H)), Conv2d(8, 5)])
>>> [c.condition for c in constraints_in(net.activation_count)]
['H - 4 >= 1']
>>> evaluate(net.activation_count, B=1, H=2)
Traceback (most recent call last):
...
memtheory.errors.KernelTooLargeError: H=2 is too small for layer 1 of 'network', Conv2d ...
"""

from memtheory.constraints.bounds import largest_valid, smallest_valid
from memtheory.constraints.carried import (
    OWNER_LIMIT,
    REGISTRY_LIMIT,
    Candidates,
    candidates,
    carry,
    constraints_in,
    warn_unknown,
)
from memtheory.constraints.checks import check_sizes, too_small
from memtheory.constraints.known_sizes import register_sizes, sizes_inside, warn_outside
from memtheory.constraints.size_constraint import (
    MODEL_LIMIT,
    CarriesConstraints,
    SizeConstraint,
    as_constraints,
)

__all__ = [
    "MODEL_LIMIT",
    "CarriesConstraints",
    "OWNER_LIMIT",
    "REGISTRY_LIMIT",
    "Candidates",
    "SizeConstraint",
    "candidates",
    "carry",
    "check_sizes",
    "constraints_in",
    "register_sizes",
    "sizes_inside",
    "smallest_valid",
    "warn_outside",
    "as_constraints",
    "largest_valid",
    "too_small",
    "warn_unknown",
]
