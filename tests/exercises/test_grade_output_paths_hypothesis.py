"""``memtheory grade``'s output paths under hypothesis: never a clobbered file, never a raw error.

Issue 27 asks for the CLI's output paths in the hypothesis suite. Each case grades a
folder of one answer file and points one to three of ``--json``, ``--csv``,
``--exercises`` and ``--gradebook`` at drawn kinds of path, with or without
``--force``. The rules, from ``memtheory grade --help``: results go to regular files or
new paths; an existing result is replaced only with ``--force``; a device, a FIFO, a
folder, a link or a path in a missing folder is refused before any grading, with exit
status 2. Whatever is drawn, the command returns a status (no exception), every path
that was not to be written keeps its kind and its bytes, and a refused run writes
nothing. The last test prints how many cases ran.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memtheory.cli import main
from tests.test_api_hypothesis import print_tried

OPTIONS = ("--json", "--csv", "--exercises", "--gradebook")
KINDS = ("new", "existing", "missing-folder", "directory", "fifo", "link", "device")
REFUSED = {"missing-folder", "directory", "fifo", "link", "device"}
TRIED: Counter[str] = Counter()


def _make(kind: str, place: Path) -> str:
    """Create a path of ``kind`` in ``place`` and return it (as the command line gets it)."""
    target = place / "out"
    if kind == "existing":
        target.write_text("an earlier result")
    elif kind == "missing-folder":
        target = place / "no such folder" / "out"
    elif kind == "directory":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "link":
        (place / "precious.txt").write_text("keep me")
        target.symlink_to(place / "precious.txt")
    elif kind == "device":
        return "/dev/null"
    return str(target)


def _state(path: str) -> tuple[int, bytes | None]:
    """The path's file type and, for a regular file, its bytes (None when absent)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return (0, None)
    data = Path(path).read_bytes() if stat.S_ISREG(mode) else None
    return (stat.S_IFMT(mode), data)


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(chosen=st.dictionaries(st.sampled_from(OPTIONS), st.sampled_from(KINDS),
                              min_size=1, max_size=3),
       force=st.booleans())
def test_output_paths_are_written_as_the_rules_say(tmp_path_factory, chosen, force):
    """Refused (2) before grading, or written where allowed; nothing else is touched."""
    root = tmp_path_factory.mktemp("grade")
    folder = root / "submissions"
    folder.mkdir()
    (folder / "ada.toml").write_text('[answers]\n"ch02.q2" = "1"\n')
    paths = {}
    for option, kind in chosen.items():
        place = root / option.strip("-")
        place.mkdir()
        paths[option] = (kind, _make(kind, place))
    before = {option: _state(path) for option, (_, path) in paths.items()}
    argv = ["grade", str(folder), "--quiet", *(["--force"] if force else [])]
    for option, (_, path) in paths.items():
        argv += [option, path]
    status = main(argv)
    kinds = {kind for kind, _ in paths.values()}
    refused = bool(kinds & REFUSED) or ("existing" in kinds and not force)
    TRIED["refused" if refused else "written"] += 1
    assert status == (2 if refused else 0), (chosen, force)
    for option, (kind, path) in paths.items():
        after = _state(path)
        if refused or kind in REFUSED:
            assert after == before[option], (option, kind)  # untouched: kind and bytes
        else:
            assert stat.S_ISREG(after[0]) and after[1] != before[option][1], (option, kind)
    if refused:
        assert not (root / "submissions.grades.json").exists()  # refused before grading
    if "link" in kinds:
        assert (root / next(o for o, (k, _) in paths.items() if k == "link").strip("-")
                / "precious.txt").read_text() == "keep me"


def test_zz_report(capsys):
    """Print how many output-path cases ran."""
    print_tried(capsys, TRIED, "grade output-path hypothesis suite, cases")
