"""Print the management API's OpenAPI document (the console generates its API types from it):

    python -m jobring.admin.api.management.openapi_dump > console/openapi.json
"""

from __future__ import annotations

import json
import sys

from jobring.admin.api.management.app import openapi_document


def dump() -> str:
    """The document as stable, indented JSON."""
    return json.dumps(openapi_document(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    sys.stdout.write(dump())
