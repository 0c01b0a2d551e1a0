"""The suite's own layout: pytest imports each test file by its base name (tests/ has no packages), so two
files of one name in different folders stop the whole run at collection ("import file mismatch")."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).parent


def test_no_two_test_files_share_a_name():
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
