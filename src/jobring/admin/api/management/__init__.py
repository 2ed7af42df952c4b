"""The management REST API (``/api/v1``) and the XXL-JOB 3.x job-management aliases."""

from jobring.admin.api.management.app import API_PREFIX, management_app
from jobring.admin.api.management.services import ManagementServices
from jobring.admin.api.management.xxl3 import XXL3_API_NAMES, xxl3_api_app, xxl3_api_routes

__all__ = [
    "API_PREFIX",
    "XXL3_API_NAMES",
    "ManagementServices",
    "management_app",
    "xxl3_api_app",
    "xxl3_api_routes",
]
