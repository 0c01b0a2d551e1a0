"""The run options are one dataclass (attnprof.options): `run` and `sweep` offer a flag for each field that
names them, a flag left out takes the field's default, and the API takes the same fields as keywords."""

from __future__ import annotations

from dataclasses import fields

import pytest

from attnprof.cli import build_parser
from attnprof.cli.args import given_options
from attnprof.options import RUN, SWEEP, RunOptions, flag_of, offered


def parsed(*argv: str):
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("command", [RUN, SWEEP])
def test_every_offered_field_has_its_flag_in_help(command):
    text = build_parser()._subparsers._group_actions[0].choices[command].format_help()
    for f in offered(command):
        assert flag_of(f) in text and f.metadata["help"], f.name


def test_flags_left_out_are_not_given_and_take_the_fields_defaults():
    args = parsed("run")
    assert given_options(args, RUN) == {}
    assert RunOptions(**given_options(args, RUN)) == RunOptions()


def test_warmup_0_switches_and_lists_parse_into_the_fields():
    args = parsed("run", "--warmup", "0", "--no-graph", "--variants", "naive, sdpa-math", "--schedule", "0,1,2")
    assert given_options(args, RUN) == {"warmup": 0, "graph": False, "variants": ("naive", "sdpa-math"),
                                        "schedule": (0, 1, 2)}


def test_a_sweep_axis_is_a_list_and_dtype_is_given_only_when_typed():
    assert given_options(parsed("sweep", "--seq", "64,128"), SWEEP) == {"seq": (64, 128)}
    assert given_options(parsed("sweep", "--dtype", "bf16,fp16"), SWEEP) == {"dtype": ("bf16", "fp16")}


@pytest.mark.parametrize("argv,debug", [(["--debug", "run"], True), (["run", "--debug"], True), (["run"], False),
                                        (["sweep", "--debug"], True), (["analyze", "t.json", "--debug"], True)])
def test_debug_is_accepted_before_or_after_the_subcommand(argv, debug):
    assert parsed(*argv).debug is debug


def test_the_api_checks_whole_numbers_as_the_cli_does():
    with pytest.raises(ValueError, match="warmup must be a whole number >= 0, got -1"):
        RunOptions(warmup=-1)
    assert RunOptions(warmup=0).warmup == 0
    counted = [f.name for f in fields(RunOptions) if f.metadata["least"] is not None]
    assert {"batch", "repeats", "warmup", "rotate_inputs", "nproc"} <= set(counted)


def test_the_source_rewrite_is_rewrite_and_patch_its_old_name():
    new, old = parsed("rewrite", "m.py:make", "--write"), parsed("patch", "m.py:make", "--write")
    assert new.func is old.func and new.write and old.write
