"""Who is calling, and what their role and group permissions let them do.

viewer: read within permitted groups. operator: read, write and trigger within permitted
groups; no users or settings. admin: everything, every group.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from jobring.admin.security.roles import Role
from jobring.admin.store.records import User


class AuthMethod(StrEnum):
    SESSION = "session"
    TOKEN = "token"


@dataclass(frozen=True, slots=True)
class Principal:
    user: User
    method: AuthMethod
    csrf_token: str | None = None
    token_id: int | None = None
    session_hash: str | None = None  # the stored hash of the session id, for session callers

    @property
    def role(self) -> Role:
        try:
            return Role(self.user.role)
        except ValueError:
            # An unknown role code (e.g. hand-edited row) gets the least power.
            return Role.VIEWER

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def can_write(self) -> bool:
        return self.role in (Role.ADMIN, Role.OPERATOR)

    @property
    def can_edit_glue(self) -> bool:
        return self.is_admin or (self.role is Role.OPERATOR and self.user.glue_permission)

    def readable_group_ids(self) -> list[int] | None:
        """The groups this user may see; None means every group."""
        return None if self.is_admin else self.user.permitted_group_ids

    def can_read_group(self, group_id: int) -> bool:
        return self.is_admin or group_id in self.user.permitted_group_ids

    def can_write_group(self, group_id: int) -> bool:
        return self.can_write and self.can_read_group(group_id)
