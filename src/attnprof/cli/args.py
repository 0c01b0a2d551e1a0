"""Argument types, the flags built from the run options, and the option groups several subcommands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from attnprof import options as opts

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def typed(parse: Callable[[str], object], name: str) -> Callable[[str], object]:
    """argparse's type for an options parser: its ValueError becomes the one-line usage error."""

    def convert(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = name  # argparse names the type in its own messages
    return convert


positive_int = typed(opts.whole_number(1), "positive_int")


def listed(parse: Callable[[str], object] | None) -> Callable[[str], list]:
    """A sweep axis: `512,1024` -> [512, 1024], each value as the run option parses it."""
    one = parse or str

    def parse_list(text: str) -> list:
        parts = [p.strip() for p in text.split(",")]
        if not all(parts):
            raise ValueError(f"expected a comma-separated list, got {text!r}")
        return [one(p) for p in parts]

    return parse_list


def add_options(p: argparse.ArgumentParser, command: str) -> None:
    """The run options `command` offers, one flag each (lists for a sweep's axes). Every flag's default is
    None (a switch's: its field's default), so `given_options` knows what the user typed."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in opts.offered(command):
        m, flag = f.metadata, opts.flag_of(f)
        where = groups.setdefault(m["group"], p.add_argument_group(m["group"])) if m["group"] else p
        if isinstance(f.default, bool):
            where.add_argument(flag, dest=f.name, action="store_false" if f.default else "store_true", help=m["help"])
            continue
        axis = m["axis"] and command == opts.SWEEP
        parse = listed(m["parse"]) if axis else m["parse"]
        where.add_argument(flag, dest=f.name, type=typed(parse, f.name) if parse else str, default=None,
                           choices=m["choices"], metavar=m["metavar"],
                           help=m["help"] + (" (comma-separated)" if axis else ""))


def given_options(args: argparse.Namespace, command: str) -> dict:
    """The run options the user gave on the command line: {field name: value}."""
    given = {}
    for f in opts.offered(command):
        value = getattr(args, f.name)
        if value is not None and value != (f.default if isinstance(f.default, bool) else None):
            given[f.name] = tuple(value) if isinstance(value, list) else value
    return given


def add_device(p: argparse.ArgumentParser) -> None:
    """--device for the subcommands that are not runs (list, lint, patch), as `run` offers it."""
    p.add_argument("--device", default="auto", choices=opts.DEVICES)
