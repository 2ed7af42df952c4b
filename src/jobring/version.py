"""The installed jobring version (the package metadata), for answers that report it."""

from __future__ import annotations

from importlib import metadata


def jobring_version() -> str:
    try:
        return metadata.version("jobring")
    except metadata.PackageNotFoundError:  # running from a source tree without install
        return "0+unknown"
