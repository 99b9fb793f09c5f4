"""What every command's options share: the help format (each option says its default) and option types."""
from __future__ import annotations

import argparse
from typing import Any, Optional


class HelpFormatter(argparse.HelpFormatter):
    """Adds ``(default: X)`` to an option's help unless the help already speaks of its default or there is none
    to show (None, False, or a positional argument)."""

    def _get_help_string(self, action: argparse.Action) -> Optional[str]:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS) and bool(action.option_strings)
        if shown and "default" not in text and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def deadline(text: str) -> Any:
    """A ``--deadline-ms`` value: milliseconds, or ``none`` for no deadline."""
    if text.strip().lower() == "none":
        return None
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 ms or 'none', got {text!r}")
    return value


RANKER_HELP = ("learned ranker: 'default' (the one shipped with medretrieve, fitted on the public BioASQ 7b and 12b "
               "files), 'none' (heuristic rerank), or a ranker JSON (medretrieve fit-ranker)")


def ranker_arg(text: str) -> Optional[str]:
    """A ``--ranker`` value: ``none`` for no learned ranker, else ``default`` or a JSON path as given."""
    return None if text.strip().lower() == "none" else text
