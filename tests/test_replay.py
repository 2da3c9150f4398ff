"""``memtheory estimate`` at new sizes from a replay entry: the derived answer, without sympy.

Issue 26: the same question at a new ``--batch`` or ``--seq`` is answered from
plain numbers (:mod:`memtheory.estimate.replay`). Each case derives a question
once with the cache on (which writes the entry), then asks it at other sizes:
what the entry prints must be what the derived path
(:func:`~memtheory.estimate.command.main_estimate`, no cache read) prints for the
same command line, text and ``--json``, with the same exit status. ``--gpus
auto`` searches the device counts at each size: its entry keeps the peak per
device of every data-parallel size tried (:func:`memtheory.estimate.replay.searched_at`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memtheory.cli import main
from memtheory.estimate import replay
from memtheory.estimate.command import main_estimate

ROOT = Path(__file__).resolve().parents[1]

LLAMA_POSITIONS = 8192
"""Llama 3's max_position_embeddings (Meta's config.json for Llama-3-8B), the preset's limit."""
GPT2_POSITIONS = 1024
"""GPT-2's n_positions (OpenAI's config.json for gpt2), the built-in model's limit."""

CASES = {
    "README's LoRA question": (
        ["llama-3-8b", "--lora", "16", "--seq", "{s}", "--batch", "{b}", "--gpu", "RTX 4090"],
        (1, 4096), [(3, 1000), (1, LLAMA_POSITIONS), (64, 16), (2, 2048)],
    ),
    "full training, --json": (
        ["qwen2.5-0.5b", "--batch={b}", "--seq={s}", "--gpu", "H100-80GB", "--json"],
        (2, 512), [(8, 2048), (1, 1), (200, 4096)],
    ),
    "no card": (["qwen2.5-0.5b", "--batch", "{b}", "--seq", "{s}"], (1, 128), [(4, 1024)]),
    "gradient accumulation": (
        ["qwen2.5-0.5b", "--batch", "{b}", "--seq", "{s}", "--grad-accum", "4", "--gpu", "L4"],
        (1, 256), [(2, 512), (16, 2048)],
    ),
    "--check, both verdicts": (
        ["llama-3-8b", "--lora", "16", "--seq", "{s}", "--batch", "{b}", "--gpu", "A100-80GB",
         "--check"],
        (1, 1024), [(1, 4096), (32, 8192)],
    ),
    "GPT-2, the README's first question (a position limit)": (
        ["gpt2", "--batch", "{b}", "--seq", "{s}", "--gpu", "RTX 4090"],
        (8, 1024), [(1, 1), (30, 1000), (9, 1024), (200, 64)],
    ),
    "BERT, LoRA, --json": (
        ["bert-base", "--lora", "8", "--batch", "{b}", "--seq", "{s}", "--gpu", "T4", "--json"],
        (16, 128), [(1, 512), (300, 77)],
    ),
    "ZeRO-3 on 8 GPUs (a count given)": (
        ["llama-3-8b", "--seq", "{s}", "--batch", "{b}", "--gpus", "8", "--zero", "3", "--gpu",
         "H100-80GB"],
        (1, 4096), [(2, 2048), (16, 8192)],
    ),
    "vision model, batch only": (["mobilenet-v2", "--batch", "{b}", "--gpu", "T4"], (8, None),
                                 [(1, None), (100, None), (4096, None)]),
}
"""Questions derived once at their first sizes, then asked at each of the others."""


def _argv(template: list[str], batch: int, sequence: int | None) -> list[str]:
    return [part.format(b=batch, s=sequence) for part in template]


def _derived(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, int]:
    """What the derived path prints for ``argv``, and its exit status (no answer or entry read)."""
    capsys.readouterr()
    status = main_estimate(argv)
    return capsys.readouterr().out, status


def _replayed(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, int | None]:
    capsys.readouterr()
    status = replay.replayed(argv)
    return capsys.readouterr().out, status


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A cache directory of the test's own (the tests' default keeps nothing on disk)."""
    monkeypatch.setenv("MEMTHEORY_CACHE", str(tmp_path))
    return tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_new_sizes_print_what_the_derived_path_prints(name, cache, capsys) -> None:
    """Each question at new sizes: the entry prints the derived text (or JSON) and exit status."""
    template, first, others = CASES[name]
    capsys.readouterr()
    asked = main(["estimate", *_argv(template, *first)])
    capsys.readouterr()
    assert asked in (0, 1)
    assert len(list(cache.glob("*-replay-*.json"))) == 1, "the derived answer left an entry"
    for sizes in others:
        argv = _argv(template, *sizes)
        replayed = _replayed(argv, capsys)
        assert replayed[1] is not None, f"{sizes}: answered from the entry"
        assert replayed == _derived(argv, capsys), sizes


@pytest.mark.slow
def test_text_and_json_share_one_entry(cache, capsys) -> None:
    """An entry written for the text answer prints ``--json`` too (and the reverse)."""
    base = ["qwen2.5-0.5b", "--seq", "256", "--gpu", "T4"]
    assert main(["estimate", *base, "--batch", "2"]) == 0
    argv = [*base, "--batch", "5", "--json"]
    replayed = _replayed(argv, capsys)
    assert replayed[1] == 0
    assert replayed == _derived(argv, capsys)
    assert json.loads(replayed[0])["settings"]["batch"] == 5


@pytest.mark.slow
def test_an_entry_written_as_json_prints_text_when_text_is_asked(cache, capsys) -> None:
    """The command line says how to print (``--json``, or argparse's ``--js``), not the entry."""
    base = ["mobilenet-v2", "--gpu", "T4"]
    for asked, argv in [([*base, "--batch", "8", "--json"], [*base, "--batch", "9"]),
                        ([*base, "--batch", "8", "--js"], [*base, "--batch", "10", "--js"])]:
        assert main(["estimate", *asked]) == 0
        replayed = _replayed(argv, capsys)
        assert replayed[1] == 0, argv
        assert replayed == _derived(argv, capsys), argv
        assert replayed[0].startswith("{") == (argv[-1] == "--js"), argv


@pytest.mark.slow
@settings(max_examples=20)
@given(question=st.sampled_from(["README's LoRA question",
                                 "GPT-2, the README's first question (a position limit)"]),
       batch=st.integers(1, 4096), share=st.fractions(0, 1))
def test_any_sizes_within_the_model_print_the_derived_answer(question, batch, share) -> None:
    """For sizes drawn anywhere in the model's range, the entry prints the derived answer.

    The entry prints the formula's branches that peak on a grid of sizes; here every
    branch that peaks anywhere in the range is among them (a branch missing would be
    answered by the derived path, correct but slow: this test says so).
    """
    from contextlib import redirect_stdout
    from io import StringIO
    from tempfile import TemporaryDirectory

    template, first, _ = CASES[question]
    positions = LLAMA_POSITIONS if "LoRA" in question else GPT2_POSITIONS
    sequence = max(1, math.ceil(share * positions))
    with TemporaryDirectory() as directory:
        os.environ["MEMTHEORY_CACHE"] = directory
        try:
            with redirect_stdout(StringIO()):
                main(["estimate", *_argv(template, *first)])
            argv = _argv(template, batch, sequence)
            with redirect_stdout(StringIO()) as printed:
                status = replay.replayed(argv)
            assert status is not None, f"B={batch}, S={sequence}: not answered from the entry"
            with redirect_stdout(StringIO()) as derived:
                expected = main_estimate(argv)
        finally:
            os.environ["MEMTHEORY_CACHE"] = "off"
    assert (printed.getvalue(), status) == (derived.getvalue(), expected)


@pytest.mark.slow
def test_sizes_the_derived_path_refuses_are_left_to_it(cache, capsys) -> None:
    """A sequence past the model's positions, or a batch below 1: no answer from the entry."""
    template = CASES["README's LoRA question"][0]
    assert main(["estimate", *_argv(template, 1, 4096)]) == 0
    capsys.readouterr()
    for sizes in [(1, LLAMA_POSITIONS + 1), (0, 4096), (-2, 4096), (1, 0)]:
        assert _replayed(_argv(template, *sizes), capsys) == ("", None), sizes
    assert main(["estimate", *_argv(template, 1, LLAMA_POSITIONS + 1)]) == 2
    assert f"at most {LLAMA_POSITIONS} positions" in capsys.readouterr().err


@pytest.mark.slow
def test_a_changed_option_is_another_question(cache, capsys) -> None:
    """Any option besides the sizes is part of the key: another rank finds no entry."""
    assert main(["estimate", "llama-3-8b", "--lora", "16", "--seq", "512"]) == 0
    assert replay.replayed(["llama-3-8b", "--lora", "8", "--seq", "1024"]) is None
    assert replay.replayed(["llama-3-8b", "--lora", "16", "--seq", "1024"]) == 0


def test_a_damaged_entry_is_derived_again(cache, capsys) -> None:
    """An entry that is not JSON, or not an entry, answers nothing (the command derives)."""
    argv = ["llama-3-8b", "--seq", "512"]
    found = replay._path(argv)  # noqa: SLF001 - where the entry would be
    assert found is not None
    found[0].write_text("{not json")
    assert replay.replayed(argv) is None
    found[0].write_text(json.dumps({"format": replay.FORMAT, "names": ["B", "S"]}))
    assert replay.replayed(argv) is None
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["m", "--batch", "4", "--lora", "8", "--seq=16"], (["m", "--lora", "8"],
                                                             {"batch": 4, "seq": 16})),
        (["m", "--batch", "4", "--batch", "6"], (["m"], {"batch": 6})),
        (["m", "--json", "--gpu", "T4"], (["m", "--gpu", "T4"], {})),
        (["m", "--batch"], None),
        (["m", "--batch", "four"], None),
        (["m", "--ba", "4"], None),
        (["m", "--se=4"], None),
        (["m", "--", "--batch", "4"], None),
        (["m", "--sweep", "batch=1,2"], None),
    ],
)
def test_the_sizes_are_read_as_argparse_reads_them(argv, expected) -> None:
    """The sizes come out of the key; what argparse might read another way gives None."""
    assert replay.sized(argv) == expected


@pytest.mark.slow
def test_the_read_back_path_imports_no_sympy(tmp_path: Path) -> None:
    """In a fresh interpreter, the README's LoRA question at new sizes never imports sympy."""
    script = (
        "import json, sys\nfrom memtheory.cli import main\nstatus = main(sys.argv[1:])\n"
        "print(json.dumps({'status': status, 'sympy': 'sympy' in sys.modules}), file=sys.stderr)"
    )
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MEMTHEORY_CACHE": str(tmp_path)}
    template = CASES["README's LoRA question"][0]
    runs = []
    for sizes in [(1, 4096), (2, 3000)]:
        done = subprocess.run(
            [sys.executable, "-c", script, "estimate", *_argv(template, *sizes)],
            capture_output=True, text=True, env=environment, cwd=ROOT, check=False,
        )
        runs.append((done.stdout, json.loads(done.stderr.strip().splitlines()[-1])))
    (first, derived), (again, read_back) = runs
    assert derived == {"status": 0, "sympy": True}, "the check sees sympy where it is imported"
    assert read_back["sympy"] is False
    assert "batch 2, sequence 3000" in again and first != again
    environment["MEMTHEORY_CACHE"] = "off"
    done = subprocess.run(
        [sys.executable, "-m", "memtheory.cli", "estimate", *_argv(template, 2, 3000)],
        capture_output=True, text=True, env=environment, cwd=ROOT, check=False,
    )
    assert (done.stdout, done.returncode) == (again, read_back["status"])


@pytest.mark.slow
def test_sizes_left_out_are_their_defaults(cache, capsys) -> None:
    """Derived without --batch/--seq, asked with them (and the reverse): one entry, same answers."""
    base = ["llama-3-8b", "--lora", "16", "--gpu", "RTX 4090"]
    assert main(["estimate", *base]) == 0
    for argv in ([*base, "--batch", "2", "--seq", "300"], ["--seq", "512", *base],
                 ["--batch", "1", *base, "--json"], base):
        replayed = _replayed(argv, capsys)
        assert replayed[1] is not None, argv
        assert replayed == _derived(argv, capsys), argv
    assert len(list(cache.glob("*-replay-*.json"))) == 1


@pytest.mark.slow
def test_every_branch_kept_is_the_formula_printed_where_it_peaks() -> None:
    """Each formula branch kept is what ``formula_at_peak`` prints at sizes that choose it."""
    from dataclasses import replace

    from memtheory.estimate import estimate
    from memtheory.estimate.replay_entry import GRID_BATCHES, GRID_SEQUENCES, replay_entry

    answer = estimate("llama-3-8b", lora=16, sequence=4096, gpu="RTX 4090")
    entry = replay_entry(answer, check=False, asked_json=False, printed=answer.report())
    assert entry is not None and len(entry["branches"]) > 1
    leaves = replay.compiled_function(entry["leaves"])
    seen: dict[str, str] = {}
    for batch in GRID_BATCHES:
        for sequence in GRID_SEQUENCES:
            if sequence > LLAMA_POSITIONS:
                continue
            key = ",".join(map(str, replay.chosen_leaves(entry["tree"], leaves(batch, sequence))))
            if key not in seen:
                settings = {**answer.settings, "batch": batch, "sequence": sequence}
                seen[key] = str(replace(answer, settings=settings).formula_at_peak)
    assert seen == entry["branches"]


def test_an_answer_with_a_warning_leaves_no_entry(cache, capsys) -> None:
    """Whatever the command says on standard error, the entry could not say: none is written."""
    from memtheory.estimate.answer_cache import answered

    argv = ["llama-3-8b", "--seq", "512"]

    def warned() -> int:
        replay.record({"format": replay.FORMAT})  # what a derived answer would leave
        print("a warning", file=sys.stderr)
        return 0

    assert answered("estimate", argv, warned) == 0
    assert "a warning" in capsys.readouterr().err
    assert not list(cache.glob("*-replay-*.json"))


ZERO3 = ["--gpus", "auto", "--zero", "3"]
AUTO_CASES = {
    "README's ZeRO-3 question, H100-80GB": (
        ["llama-3-8b", "--seq", "{s}", "--batch", "{b}", *ZERO3, "--gpu", "H100-80GB"],
        (1, 4096), [(1, 4088), (1, 2000), (1, 128), (1, 100), (2, 64)],
    ),
    "Llama-3-8B, A100-40GB": (
        ["llama-3-8b", "--seq", "{s}", "--batch", "{b}", *ZERO3, "--gpu", "A100-40GB"],
        (1, 64), [(1, 100), (3, 32), (1, 4096), (1, 3000)],
    ),
    "GPT-2 (a position limit), every count, a memory limit": (
        ["gpt2", "--seq", "{s}", "--batch", "{b}", *ZERO3, "--gpu-counts", "any", "--limit",
         "3.5 GB"],
        (1, 1024), [(1, 1000), (1, 1), (2, 300), (3, 1024)],
    ),
    "GPT-2, --check (both verdicts), RTX 4090": (
        ["gpt2", "--seq", "{s}", "--batch", "{b}", *ZERO3, "--gpu", "RTX 4090", "--check"],
        (16, 1024), [(16, 1000), (64, 1024), (1, 64), (200, 1024)],
    ),
}
"""``--gpus auto`` questions derived once at their first sizes, then asked at the others."""


def _entry(cache: Path) -> dict:
    """The one replay entry in ``cache``."""
    (path,) = cache.glob("*-replay-*.json")
    return json.loads(path.read_text(encoding="utf-8"))


def _not_kept(argv: list[str], cache: Path, capsys: pytest.CaptureFixture[str]) -> bool:
    """Whether the entry lacks a peak the derived search at ``argv`` tried, or its answer.

    Why the entry left the question to the derived path.
    """
    found = json.loads(_derived([*argv, "--json"], capsys)[0])["gpu_search"]
    entry = _entry(cache)
    group = entry["search"]["group"]
    peaks = {str(row["gpus"] // group) for row in found["tried"]}
    answer = str((found["gpus"] or group) // group)  # none fits: the answer on one replica
    return not peaks <= set(entry["search"]["peaks"]) or answer not in entry["answers"]


@pytest.mark.slow
@pytest.mark.parametrize("name", AUTO_CASES)
def test_gpus_auto_at_new_sizes_prints_what_the_derived_path_prints(name, cache, capsys) -> None:
    """--gpus auto at new sizes: the entry prints the derived text and JSON, byte for byte.

    Its entry keeps the peak per device of every data-parallel size the search
    tried and the answer at each count found; a size whose search reaches a
    count not kept yet is derived once, and answered from the entry from then on.
    """
    template, first, others = AUTO_CASES[name]
    capsys.readouterr()
    assert main(["estimate", *_argv(template, *first)]) in (0, 1)
    capsys.readouterr()
    assert "search" in _entry(cache), "the derived answer left a --gpus auto entry"
    straight, statuses = 0, set()
    for sizes in others:
        argv = _argv(template, *sizes)
        replayed = _replayed(argv, capsys)
        if replayed[1] is None:  # a count not kept yet: derived once, then kept
            assert _not_kept(argv, cache, capsys), sizes

            assert main(["estimate", *argv]) in (0, 1)
            replayed = _replayed(argv, capsys)
        else:
            straight += 1
        assert replayed[1] is not None, f"{sizes}: answered from the entry"
        assert replayed == _derived(argv, capsys), sizes
        statuses.add(replayed[1])
        as_json = [*argv, "--json"]
        assert _replayed(as_json, capsys) == _derived(as_json, capsys), sizes
    assert straight, "some sizes were answered from the entry as first written"
    assert statuses == ({0, 1} if "--check" in template else {0})


@pytest.mark.slow
def test_a_count_not_kept_is_derived_once_then_kept(cache, capsys) -> None:
    """At 128 tokens two H100s suffice, not the four found at 4096: derived once, then replayed."""
    template = AUTO_CASES["README's ZeRO-3 question, H100-80GB"][0]
    assert main(["estimate", *_argv(template, 1, 4096)]) == 0
    before = _entry(cache)
    assert list(before["answers"]) == ["4"]
    assert set(before["search"]["peaks"]) == {"1", "2", "4"}  # 1, 2 and 4 tried
    argv = _argv(template, 1, 128)
    assert _replayed(argv, capsys) == ("", None)
    assert main(["estimate", *argv]) == 0
    after = _entry(cache)
    assert set(after["answers"]) == {"2", "4"}  # the new count beside the old
    for sizes in [(1, 4096), (1, 128), (1, 120)]:
        argv = _argv(template, *sizes)
        replayed = _replayed(argv, capsys)
        assert replayed[1] == 0
        assert replayed == _derived(argv, capsys)


def test_a_search_entry_without_a_count_answers_nothing(cache, capsys) -> None:
    """An entry whose search needs a peak it lacks, or is damaged, leaves the question to derive."""
    argv = ["llama-3-8b", "--seq", "512", *ZERO3, "--gpu", "H100-80GB"]
    found = replay._path(argv)  # noqa: SLF001 - where the entry would be
    assert found is not None
    answer = {"default_sequence": 512, "positions": 8192, "kind": "sequence"}
    search = {"names": ["B", "S"], "usable": 100, "group": 1, "most": 4096, "every": False,
              "whole": False, "counts": "powers of two", "peaks": {"1": "lambda B, S: (B*S)"}}
    for broken in [search, {**search, "peaks": {"1": "lambda B, S: (B*S"}}, {"names": ["B"]}]:
        found[0].write_text(json.dumps({"format": replay.FORMAT, "search": broken,
                                         "answers": {"1": answer}}))
        assert replay.replayed(argv) is None
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_gpus_auto_read_back_imports_no_sympy(tmp_path: Path) -> None:
    """In fresh interpreters, the ZeRO-3 question at new sizes imports no sympy.

    Run as benchmarks/estimate_command.py runs it (its ``PROBED`` command, which
    says on standard error whether sympy was imported): the benchmark's verdict
    line rests on that probe.
    """
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from estimate_command import PROBED, QUESTIONS, new_sizes
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "MEMTHEORY_CACHE": str(tmp_path)}
    question = QUESTIONS["ZeRO-3"]
    runs = []
    for argv in [question, new_sizes(question, 0)]:
        done = subprocess.run([sys.executable, "-c", PROBED, "estimate", *argv],
                              capture_output=True, text=True, env=environment, cwd=ROOT,
                              check=False)
        runs.append((done.stdout, done.returncode, done.stderr.strip().splitlines()[-1]))
    (first, _, derived), (again, status, read_back) = runs
    assert derived == "sympy imported: True", "the probe sees sympy where it is imported"
    assert read_back == "sympy imported: False"
    assert "sequence 4088" in again and first != again
    environment["MEMTHEORY_CACHE"] = "off"
    done = subprocess.run(
        [sys.executable, "-m", "memtheory.cli", "estimate", *new_sizes(question, 0)],
        capture_output=True, text=True, env=environment, cwd=ROOT, check=False,
    )
    assert (done.stdout, done.returncode) == (again, status)


def _trees(leaf_count: int) -> st.SearchStrategy[object]:
    """Formula trees as a replay entry keeps them: maxima, sums and products over leaf indices."""
    leaves = st.integers(0, leaf_count - 1)
    return st.recursive(
        leaves,
        lambda inner: st.tuples(st.sampled_from(["max", "add", "mul"]),
                                st.lists(inner, min_size=1, max_size=4)).map(list),
        max_leaves=20,
    )


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_compiled_leaf_chooser_chooses_as_chosen_leaves(data) -> None:
    """leaf_chooser (written once) picks the leaves chosen_leaves picks, ties included."""
    from fractions import Fraction

    count = data.draw(st.integers(1, 6))
    tree = data.draw(_trees(count))
    numbers = st.one_of(st.integers(-3, 3), st.fractions(-3, 3, max_denominator=4))
    values = data.draw(st.lists(numbers, min_size=count, max_size=count))
    choose = replay.leaf_chooser(tree)
    assert choose(values) == replay.chosen_leaves(tree, values)
    assert choose([Fraction(v) for v in values]) == replay.chosen_leaves(tree, values)
