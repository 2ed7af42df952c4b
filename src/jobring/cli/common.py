"""What every command module shares."""

from __future__ import annotations

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input on the command line: printed to stderr, exit code 2."""
