"""Every endpoint of the management API, grouped as the API groups them."""

from jobring.client.endpoints.access import AuthApi, SettingsApi, TokensApi, UsersApi
from jobring.client.endpoints.audit import AuditApi
from jobring.client.endpoints.calendars import CalendarsApi
from jobring.client.endpoints.groups import DashboardApi, GroupsApi
from jobring.client.endpoints.jobs import GlueApi, JobsApi
from jobring.client.endpoints.runs import RunsApi
from jobring.client.endpoints.workflows import WorkflowsApi

__all__ = [
    "AuditApi",
    "AuthApi",
    "CalendarsApi",
    "DashboardApi",
    "GlueApi",
    "GroupsApi",
    "JobsApi",
    "RunsApi",
    "SettingsApi",
    "TokensApi",
    "UsersApi",
    "WorkflowsApi",
]
