"""``memtheory estimate --sweep``: every combination, each the answer estimate() gives alone."""

import json

import pytest

from memtheory.errors import InvalidArgumentError
from memtheory.estimate.command import main_estimate
from memtheory.estimate.plan import estimate
from memtheory.estimate.sweep import MOST_POINTS, parse_sweeps, points, sweep, sweep_table


def test_every_point_is_the_single_answer():
    """Each point of a sweep equals estimate() asked that point alone (to the byte, in JSON)."""
    sweeps = parse_sweeps(["seq=64,128", "batch=1,3", "gpu=T4,L4"])
    answers = sweep("gpt2", sweeps, lora=8)
    assert [point for point, _ in answers] == points(sweeps)
    assert len(answers) == 2 * 2 * 2
    for point, answer in answers:
        alone = estimate("gpt2", lora=8, **point)
        assert answer.to_dict() == alone.to_dict()


def test_the_table_has_a_row_per_point():
    """One row per combination, the swept values first, in the order given."""
    answers = sweep("gpt2", parse_sweeps(["batch=1,2", "limit=8 GB,16 GB"]), sequence=64)
    table = sweep_table(answers)
    assert len(table.rows) == 4
    assert [row[:2] for row in table.rows] == [
        (str(p["batch"]), p["limit"]) for p, _ in answers
    ]
    fits = [row[4] for row in table.rows]
    assert fits == ["yes" if a.fits else "no" for _, a in answers]


def test_a_swept_card_replaces_the_fixed_limit():
    """--limit with --sweep gpu=...: each point is on the named card."""
    answers = sweep("gpt2", parse_sweeps(["gpu=T4"]), sequence=64, limit="1 GB")
    assert answers[0][1].budget.device == estimate("gpt2", sequence=64, gpu="T4").budget.device


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (["seq"], "write NAME=V1,V2"),
        (["colour=red"], "NAME one of batch, seq"),
        (["batch="], "a value is empty"),
        (["batch=1,,2"], "a value is empty"),
        (["batch=0"], "is not a positive whole number"),
        (["batch=two"], "is not a positive whole number"),
        (["gpus=some"], "is not a positive whole number or auto"),
        (["batch=1,1"], "a value is repeated"),
        (["batch=1", "batch=2"], "is swept already"),
        (["gpu=T4", "limit=8 GB"], "is swept already"),
    ],
)
def test_bad_specs_are_refused_with_the_fix(spec, said):
    """A malformed --sweep is a clear InvalidArgumentError, never a traceback."""
    with pytest.raises(InvalidArgumentError, match=said):
        parse_sweeps(spec)


def test_too_many_points_are_refused():
    """A sweep beyond MOST_POINTS combinations is refused before anything is derived."""
    side = int(MOST_POINTS**0.5) + 1
    values = ",".join(str(n) for n in range(1, side + 1))
    with pytest.raises(InvalidArgumentError, match="combinations"):
        parse_sweeps([f"batch={values}", f"seq={values}"])


def test_the_command_prints_a_table_and_json(capsys):
    """The CLI prints one table; with --json a list whose entries name their point."""
    argv = ["gpt2", "--lora", "8", "--sweep", "seq=64,128", "--sweep", "gpu=T4,RTX 4090"]
    assert main_estimate(argv) == 0
    text = capsys.readouterr().out
    assert "peak per device at 4 points" in text
    assert main_estimate([*argv, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [entry["sweep"] for entry in listed] == points(parse_sweeps(argv[4::2]))
    assert listed[0]["peak_bytes"] == int(estimate("gpt2", lora=8, sequence=64, gpu="T4").peak)


def test_the_command_names_the_failing_point(capsys):
    """A point the model cannot take (too long a sequence) exits 2 naming that point."""
    assert main_estimate(["gpt2", "--sweep", "seq=64,4096"]) == 2
    error = capsys.readouterr().err
    assert "at seq=4096" in error and "at most 1024 positions" in error
