"""Graded exercises: exercise sets, a grader that names misconceptions, per-learner variants.

Exercise sets live in the repository's ``exercises/`` folder, one module per
book chapter; each exercise computes its answer with memtheory (nothing is
typed in), and each learner gets their own numbers from a seed. A learner
answers in a TOML file and runs ``memtheory grade answers.toml``, or checks
one answer in a notebook:

>>> from memtheory.exercises import check
>>> check("ch02.q2", "896")
ch02.q2: passed (1/1). Correct.
>>> check("ch02.q2", "320").misconceptions
('forgot_input_depth',)

Modules
-------
``model``          exercises, sets, variants
``kinds``          answer kinds: integer, quantity, number, expression, choice
``parsing``        reading numbers, sizes and choices
``expressions``    reading formulas safely, symbolic equivalence
``reasoning``      the steps of a correct computation
``misconceptions`` named mistakes, each a way to recompute an answer
``variants``       seeds and the parameters they draw
``loader``         finding and importing the sets
``answers``        answer files (TOML)
``grading``        grading answers, files and folders
``report``         tables, JSON, CSV, atomic writes
``check``          ``check()`` for notebooks
``book``           questions and solutions as Markdown for the book's chapters (glued)
``derivation``     worked solutions: the grading computation's steps, recorded as it runs
``sections``       the book's section that teaches each kind of step a solution takes
``selfcheck``      the book's answer boxes: data for the browser, and its checker script
``class_summary``  a graded folder exercise by exercise: who got it right, common mistakes
``numeric``        exact substitution and decimal text
"""

from memtheory.exercises.answers import AnswerFile, read_answer_file
from memtheory.exercises.book import BookExercise, book_exercises, glue_exercises
from memtheory.exercises.check import CheckResult, check, question
from memtheory.exercises.errors import (
    AnswerFileError,
    AnswerFormatError,
    ExerciseDefinitionError,
    ExerciseError,
    ExerciseSetsNotFoundError,
    UnknownExerciseError,
)
from memtheory.exercises.grading import grade_answers, grade_file, grade_folder, grade_variant
from memtheory.exercises.kinds import AnswerKind, Choice, Expression, Integer, Number, Quantity
from memtheory.exercises.loader import find_sets_dir, find_variant, get_set, load_sets
from memtheory.exercises.misconceptions import MISCONCEPTIONS, Misconception, misconception
from memtheory.exercises.model import Exercise, ExerciseSet, MistakenAnswer, Params, Variant
from memtheory.exercises.numeric import at
from memtheory.exercises.reasoning import CORRECT, Reasoning
from memtheory.exercises.report import ExerciseResult, FolderSummary, GradeReport
from memtheory.exercises.variants import seed_from_learner

# registers the misconceptions of chapters 10-14 (key/value cache, checkpointing, ZeRO...)
import memtheory.exercises.technique_steps  # noqa: E402, F401  isort: skip
# registers chapters 15-16's misconceptions (residual networks, language models)
import memtheory.exercises.steps_residual  # noqa: E402, F401  isort: skip

# and those of chapters 17-18 (fine-tuning, distributed training)
import memtheory.exercises.steps_scaling  # noqa: E402, F401  isort: skip

# registers chapter 19's misconceptions (tracing your own model)
import memtheory.exercises.steps_trace  # noqa: E402, F401  isort: skip

# registers chapter 20's misconceptions (the CUDA caching allocator)
import memtheory.exercises.steps_gpu  # noqa: E402, F401  isort: skip

# registers chapters 3, 4 and 7's output sizes, ReLU output and 2-for-4-bytes misconceptions
import memtheory.exercises.steps_sizes  # noqa: E402, F401  isort: skip

__all__ = [
    "CORRECT",
    "MISCONCEPTIONS",
    "AnswerFile",
    "AnswerFileError",
    "AnswerFormatError",
    "AnswerKind",
    "BookExercise",
    "CheckResult",
    "Choice",
    "Exercise",
    "ExerciseDefinitionError",
    "ExerciseError",
    "ExerciseResult",
    "ExerciseSet",
    "ExerciseSetsNotFoundError",
    "Expression",
    "FolderSummary",
    "GradeReport",
    "Integer",
    "Misconception",
    "MistakenAnswer",
    "Number",
    "Params",
    "Quantity",
    "Reasoning",
    "UnknownExerciseError",
    "Variant",
    "at",
    "book_exercises",
    "check",
    "find_sets_dir",
    "find_variant",
    "get_set",
    "glue_exercises",
    "grade_answers",
    "grade_file",
    "grade_folder",
    "grade_variant",
    "load_sets",
    "misconception",
    "question",
    "read_answer_file",
    "seed_from_learner",
]
