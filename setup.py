"""The packages of the wheel: the library, and exercises/ shipped as memtheory.exercise_sets.

The sets stay in exercises/ in the checkout (one module per chapter, loaded by path); the wheel
carries them inside the package so that an installed memtheory finds them.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["memtheory", "memtheory.*"]), "memtheory.exercise_sets"],
    package_dir={"memtheory.exercise_sets": "exercises"},
)
