"""README's option table and finding list say what the code has: every option of every subcommand
(argparse's own parsers) and every finding id (attnprof.findings.RULES), no more and no fewer."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from attnprof.cli import build_parser
from attnprof.findings import RULES

README = Path(__file__).resolve().parents[1] / "README.md"
FLAG = re.compile(r"--[a-z][a-z0-9-]*")


def _block(name: str) -> list[list[str]]:
    """The table rows between `<!-- name -->` and `<!-- /name -->`, as cells (the header rows dropped)."""
    text = README.read_text()
    body = text[text.index(f"<!-- {name} -->"):text.index(f"<!-- /{name} -->")]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines()
            if line.startswith("|")]
    return [r for r in rows[2:]]


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"}


def test_the_readme_lists_every_option_of_every_subcommand_and_no_other():
    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    documented: dict[str, set[str]] = {}
    for commands, options, _ in _block("options"):
        for command in re.findall(r"`([a-z]+)`", commands):
            documented.setdefault(command, set()).update(FLAG.findall(options))
    everywhere = _flags(parser)  # the program's own (--debug, --version): one row, `attnprof`
    assert documented.pop("attnprof") == everywhere
    assert set(documented) <= set(subcommands), set(documented) - set(subcommands)
    for name, sub in subcommands.items():
        assert documented.get(name, set()) == _flags(sub) - everywhere, name


def test_the_readme_lists_every_finding_id_and_no_other():
    ids = [row[0].strip("`") for row in _block("findings")]
    assert sorted(ids) == sorted(RULES) and len(ids) == len(set(ids))
