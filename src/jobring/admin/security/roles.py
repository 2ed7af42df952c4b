"""Roles and group permissions.

Roles are stored in ``xxl_job_user.role`` as the reference does (1 admin, 0 normal user),
with jobring's read-only viewer as 2.
"""

from __future__ import annotations

from enum import IntEnum


class Role(IntEnum):
    OPERATOR = 0
    ADMIN = 1
    VIEWER = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str) -> Role:
        try:
            return cls[label.upper()]
        except KeyError:
            raise ValueError(f"unknown role {label!r} (expected admin, operator or viewer)") from None
