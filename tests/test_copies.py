"""Deliberate near-copies stay copies: every ``# Copied from <module>.<name> [with A->B, …]`` block equals its source
after the renames (.ci/check_copies.py, diffusers' ``make fix-copies`` habit); and the check itself fails, with the
diff, on a copy that drifted."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_copies", REPO / ".ci" / "check_copies.py")
check_copies = sys.modules["check_copies"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_copies)

SOURCE = '''
LIMIT = 3


def clamp(value, limit=LIMIT):
    """At most ``limit``."""
    return min(value, limit)


class Box:
    def area(self, side):
        return side * side
'''


def _tree(tmp_path: Path, copy: str) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "source.py").write_text(SOURCE)
    (tmp_path / "pkg" / "copy.py").write_text(textwrap.dedent(copy))
    return tmp_path / "pkg" / "copy.py"


def test_every_marked_copy_in_the_repository_matches_its_source():
    problems = check_copies.check(check_copies.python_files(REPO), REPO)
    assert not problems, "\n\n".join(problems)


def test_the_command_line_exits_zero_on_the_repository():
    proc = subprocess.run([sys.executable, str(REPO / ".ci" / "check_copies.py")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 drifted" in proc.stdout


def test_exact_and_renamed_copies_pass(tmp_path):
    copy = _tree(
        tmp_path,
        '''
        # Copied from pkg.source.LIMIT
        LIMIT = 3


        # Copied from pkg.source.clamp with clamp->cap, limit->bound
        def cap(value, bound=LIMIT):
            """At most ``bound``."""
            return min(value, bound)


        class Square:
            # Copied from pkg.source.Box.area
            def area(self, side):
                return side * side
        ''',
    )
    assert len(check_copies.find_copies(copy)) == 3
    assert check_copies.check([copy], tmp_path) == []


def test_a_drifted_copy_fails_with_the_diff_and_fix_restores_it(tmp_path):
    drifted = '''
        # Copied from pkg.source.clamp with clamp->cap
        def cap(value, limit=LIMIT):
            """At most ``limit``."""
            return max(value, limit)
        '''
    copy = _tree(tmp_path, drifted)
    (problem,) = check_copies.check([copy], tmp_path)
    assert "pkg/copy.py:3: differs from pkg.source.clamp" in problem
    assert "-    return min(value, limit)" in problem and "+    return max(value, limit)" in problem
    (fixed,) = check_copies.check([copy], tmp_path, fix=True)
    assert "rewritten" in fixed
    assert "return min(value, limit)" in copy.read_text() and check_copies.check([copy], tmp_path) == []


@pytest.mark.parametrize(
    ("copy", "message"),
    [
        ("# Copied from pkg.source.nothing\ndef f():\n    pass\n", "has no nothing"),
        ("# Copied from nowhere.clamp\ndef f():\n    pass\n", "no module of 'nowhere.clamp'"),
        ("# Copied from pkg.source.clamp\n\ndef f():\n    pass\n", "must be the line right above"),
        ("# Copied from pkg.source.clamp with clamp\ndef f():\n    pass\n", "is not of the form A->B"),
    ],
)
def test_a_bad_marker_is_named(tmp_path, copy, message):
    path = _tree(tmp_path, copy)
    with pytest.raises(ValueError, match=message):
        check_copies.check([path], tmp_path)


def test_the_marker_inside_a_string_is_text_not_a_marker(tmp_path):
    path = _tree(tmp_path, 'DOC = """\n# Copied from pkg.source.nothing\n"""\n')
    assert check_copies.find_copies(path) == []
