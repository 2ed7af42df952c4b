"""/jobs/{id}/glue: the GLUE source, its saved versions (newest 30 kept), restore.

Every call needs GLUE enabled on the admin and the caller's GLUE permission (admins have
it; operators when ``glue_permission`` is set), plus the job's group permission.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from jobring.admin.api.management import jobservice
from jobring.admin.api.management.deps import Reader, Services, Writer
from jobring.admin.api.management.errors import ERROR_RESPONSES, ApiError, not_found
from jobring.admin.api.management.models import MAX_INT32, GlueOut, GlueSave, GlueVersionOut, aware
from jobring.admin.services.audit import AuditAction
from jobring.admin.store.records import JobInfo
from jobring.core.enums import GlueType
from jobring.errors import Conflict

router = APIRouter(tags=["glue"], responses=ERROR_RESPONSES)

JobId = Annotated[int, Path(ge=1, le=MAX_INT32)]
VersionId = Annotated[int, Path(ge=1, le=MAX_INT32)]
KEEP_VERSIONS = 30


def _out(job: JobInfo) -> GlueOut:
    return GlueOut(
        job_id=job.id,
        glue_type=job.glue_type,
        glue_source=job.glue_source,
        glue_remark=job.glue_remark,
        glue_updatetime=aware(job.glue_updatetime),
    )


def _require_glue_job(job: JobInfo) -> None:
    if job.glue_type == GlueType.BEAN:
        raise Conflict(f"job {job.id} is a BEAN job; set its glue_type first", "glue_type")


@router.get("/jobs/{job_id}/glue", response_model=GlueOut, summary="The job's GLUE source")
async def get_glue(job_id: JobId, services: Services, principal: Reader) -> GlueOut:
    jobservice.ensure_glue_allowed(services, principal)
    job = await jobservice.load_job_for_read(services, principal, job_id)
    return _out(job)


@router.put("/jobs/{job_id}/glue", response_model=GlueOut, summary="Save a new GLUE source version")
async def save_glue(job_id: JobId, body: GlueSave, services: Services, principal: Writer) -> GlueOut:
    jobservice.ensure_glue_allowed(services, principal)
    job = await jobservice.load_job_for_write(services, principal, job_id)
    _require_glue_job(job)
    await services.store.glue.save(
        job.id,
        job.glue_type,
        body.glue_source,
        body.glue_remark,
        services.now_naive_utc(),
        keep=KEEP_VERSIONS,
    )
    saved = await jobservice.load_job(services, job_id)
    await services.audit.glue_event(principal, AuditAction.GLUE_SAVE, saved, before=job)
    return _out(saved)


@router.get(
    "/jobs/{job_id}/glue/versions",
    response_model=list[GlueVersionOut],
    summary="Saved GLUE versions, newest first",
)
async def glue_versions(job_id: JobId, services: Services, principal: Reader) -> list[GlueVersionOut]:
    jobservice.ensure_glue_allowed(services, principal)
    job = await jobservice.load_job_for_read(services, principal, job_id)
    return [GlueVersionOut.of(v) for v in await services.store.glue.history(job.id)]


@router.post(
    "/jobs/{job_id}/glue/versions/{version_id}/restore",
    response_model=GlueOut,
    summary="Make a saved version current again (saved as a new version)",
)
async def restore_glue(
    job_id: JobId, version_id: VersionId, services: Services, principal: Writer
) -> GlueOut:
    jobservice.ensure_glue_allowed(services, principal)
    job = await jobservice.load_job_for_write(services, principal, job_id)
    version = await services.store.glue.get_version(version_id)
    if version is None or version.job_id != job.id:
        raise not_found("GLUE version", version_id)
    glue_type = version.glue_type or job.glue_type
    if glue_type == GlueType.BEAN:
        raise ApiError(400, f"GLUE version {version_id} has no GLUE type", "version_id")
    remark = f"restored version {version.id}: {version.glue_remark}"[:128]
    await services.store.glue.save(
        job.id, glue_type, version.glue_source or "", remark, services.now_naive_utc(), keep=KEEP_VERSIONS
    )
    restored = await jobservice.load_job(services, job_id)
    await services.audit.glue_event(
        principal, AuditAction.GLUE_RESTORE, restored, before=job, restored_version=version_id
    )
    return _out(restored)
