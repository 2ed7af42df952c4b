"""`jobring cron` commands."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add this module's commands to the top-level parser."""
    parser: argparse.ArgumentParser = sub.add_parser("cron", help="(not yet available)")
    parser.set_defaults(handler=None)
