"""What ships in the package: the library and the exercise sets, no test configuration.

The wheel and sdist tests build with setuptools' own backend (no network, no
build isolation) from a copy of the checkout's files, and run the unpacked
wheel in a separate Python with neither the checkout nor MEMTHEORY_EXERCISES.
"""

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "memtheory"
SETS = PACKAGE.parent / "exercises"


def test_no_conftest_inside_the_package():
    """No conftest.py lives under memtheory/, so none ends up in the wheel."""
    assert PACKAGE.is_dir()
    assert sorted(PACKAGE.rglob("conftest.py")) == []


def _build(kind, source, out):
    """Build a ``wheel`` or ``sdist`` of ``source`` into ``out`` with setuptools, offline."""
    script = (
        f"import sys; from setuptools import build_meta as b; print(b.build_{kind}(sys.argv[1]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A copy of the checkout's tracked and new (not ignored) files, to build from."""
    root = PACKAGE.parent
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    copy = tmp_path_factory.mktemp("source")
    for name in listed:
        if (root / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, copy / name)
    return copy


def _set_files():
    return sorted([*(p.name for p in SETS.glob("*.py")), "README.md"])


@pytest.mark.slow
def test_wheel_ships_the_exercise_sets_and_grades_without_the_checkout(source, tmp_path):
    """The built wheel holds every set; unpacked alone (as pip installs it), check() grades."""
    wheel = _build("wheel", source, tmp_path / "dist")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        shipped = sorted(
            n.split("/")[-1] for n in names if n.startswith("memtheory/exercise_sets/")
        )
        assert shipped == _set_files()
        assert not any(n.startswith("exercises/") for n in names)
        assert "memtheory/exercises/selfcheck.js" in names  # the book's self-check script
        site = tmp_path / "site"
        archive.extractall(site)
    env = {k: v for k, v in os.environ.items() if k not in ("MEMTHEORY_EXERCISES", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    probe = (
        "import memtheory, memtheory.exercises as e; "
        "print(memtheory.__file__); print(e.find_sets_dir()); "
        "print(e.check('ch02.q2', '896').passed, e.check('ch14.q1', '16 GiB').passed); "
        "print(len(e.load_sets())); "
        "from memtheory.exercises.selfcheck import selfcheck_script; "
        "print('memtheorySelfCheck' in selfcheck_script())"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    module, folder, passed, count, script = done.stdout.split("\n")[:5]
    assert module.startswith(str(site)) and folder == str(site / "memtheory" / "exercise_sets")
    assert passed == "True True"
    assert int(count) == len(list(SETS.glob("ch*.py")))
    assert script == "True"


@pytest.mark.slow
def test_sdist_ships_the_exercise_sets(source, tmp_path):
    """The source distribution holds exercises/ and setup.py, so a wheel built from it has them."""
    sdist = _build("sdist", source, tmp_path / "dist")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    assert {f"exercises/{name}" for name in _set_files()} <= names
    assert "setup.py" in names
