"""Fixtures for the exercise tests: the sets, and answer files written in a temporary folder."""

import json

import pytest

from memtheory.exercises import load_sets


@pytest.fixture(scope="session")
def sets():
    """Every exercise set of the repository's exercises/ folder."""
    return load_sets()


def toml_answers(answers, learner=None, seed=None):
    """Return the text of a TOML answer file with these answers (strings quoted, numbers bare)."""
    lines = []
    if learner is not None:
        lines.append(f"learner = {json.dumps(learner)}")
    if seed is not None:
        lines.append(f"seed = {json.dumps(seed)}")
    lines.append("[answers]")
    for key, value in answers.items():
        text = json.dumps(value) if isinstance(value, str) else str(value).lower()
        lines.append(f"{json.dumps(key)} = {text}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def answer_file(tmp_path):
    """Write an answer file in a temporary folder and return its path."""

    def write(answers, name="answers.toml", learner=None, seed=None):
        path = tmp_path / name
        path.write_text(toml_answers(answers, learner, seed), encoding="utf-8")
        return path

    return write
