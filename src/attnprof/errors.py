"""Errors the user can fix. Each becomes one line on stderr and exit status 2 (no traceback unless --debug).

Every stage raises a subclass (a bad trace, an unknown variant, a bad target) so that the CLI catches
one type. They are ValueErrors too, for callers of the Python API who catch that.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user: reported in one line, exit 2."""


class PatchError(RuntimeError):
    """`attnprof.patch` cannot rewrite the module at run time; the message says why and what to do instead."""
