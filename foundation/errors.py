"""Errors that are the user's to fix, as opposed to bugs.

A ``UserError``'s message says what is wrong, where (the config field, the file and line, the reward and the
sample) and how to fix it; the command-line entry points print it in one or two lines and exit with
status 2 (no traceback unless ``--debug``). Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad input (config, file, model, reward): the message is the whole explanation."""


class ConfigError(UserError, ValueError):
    """A config field, or a combination of fields, that cannot work; the message names the fields."""


class RewardError(UserError, ValueError):
    """A reward returned something the contract forbids, or could not be built; the message names it."""
