"""GLUE script runs: the admin sends the source, the executor runs it in a subprocess.

- Off unless the executor is started with GLUE enabled (it runs code sent over
  the network); then every GLUE type answers 500 with a clear message.
- GLUE_SHELL -> ``bash``, GLUE_PYTHON -> this interpreter (``sys.executable``),
  GLUE_NODEJS -> ``node``, GLUE_PHP -> ``php``, GLUE_POWERSHELL -> ``pwsh``
  (or ``powershell``). A missing interpreter answers 500 at /run.
- GLUE_GROOVY needs a JVM: always 500.
- The source is written to ``<log_path>/gluesource/<jobId>_<glueUpdatetime>.<ext>``
  (older versions of the same job are removed) and run with the arguments
  ``params shardIndex shardTotal``; stdout and stderr go to the run log line by
  line; exit 0 is success, anything else ``script exit value(N) is failed``.
- Timeout and kill terminate the script's whole process group.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jobring.core.enums import GlueType
from jobring.executor.context import JobContext
from jobring.executor.subproc import run_streaming

__all__ = ["GlueScript", "glue_refusal", "run_script", "script_path"]

_EXTENSIONS: dict[GlueType, str] = {
    GlueType.GLUE_SHELL: ".sh",
    GlueType.GLUE_PYTHON: ".py",
    GlueType.GLUE_NODEJS: ".js",
    GlueType.GLUE_PHP: ".php",
    GlueType.GLUE_POWERSHELL: ".ps1",
}
_INTERPRETERS: dict[GlueType, tuple[str, ...]] = {
    GlueType.GLUE_SHELL: ("bash",),
    GlueType.GLUE_NODEJS: ("node", "nodejs"),
    GlueType.GLUE_PHP: ("php",),
    GlueType.GLUE_POWERSHELL: ("pwsh", "powershell"),
}


def msg_glue_type_not_valid(glue_type: str) -> str:
    return f"glueType[{glue_type}] is not valid."


MSG_GROOVY = (
    "glueType[GLUE_GROOVY] is not supported: Groovy GLUE runs only on Java executors "
    "(XXL-JOB's xxl-job-core); use a script GLUE type or a BEAN handler."
)


def msg_glue_disabled(glue_type: str) -> str:
    return (
        f"glueType[{glue_type}] refused: GLUE is disabled on this executor "
        "(start it with GLUE enabled to run scripts sent by the admin)."
    )


def interpreter_for(glue_type: GlueType) -> str | None:
    """The interpreter executable for a script GLUE type, or None when not installed."""
    if glue_type is GlueType.GLUE_PYTHON:
        return sys.executable or shutil.which("python3")
    for name in _INTERPRETERS.get(glue_type, ()):
        found = shutil.which(name)
        if found:
            return found
    return None


def glue_refusal(glue_type: str, *, enabled: bool) -> str | None:
    """Why a run of this non-BEAN glue type cannot be accepted, or None when it can."""
    try:
        kind = GlueType(glue_type)
    except ValueError:
        return msg_glue_type_not_valid(glue_type)
    if kind is GlueType.GLUE_GROOVY:
        return MSG_GROOVY
    if not kind.is_script:
        return msg_glue_type_not_valid(glue_type)
    if not enabled:
        return msg_glue_disabled(glue_type)
    if interpreter_for(kind) is None:
        wanted = " or ".join(_INTERPRETERS.get(kind, ("python3",)))
        return f"glueType[{glue_type}] cannot run: interpreter {wanted} not found on this executor's PATH."
    return None


@dataclass(frozen=True, slots=True)
class GlueScript:
    """One version of a job's GLUE source (what a script worker runs)."""

    job_id: int
    glue_type: GlueType
    glue_updatetime: int
    source: str


def script_path(glue_dir: Path, script: GlueScript) -> Path:
    return glue_dir / f"{script.job_id}_{script.glue_updatetime}{_EXTENSIONS[script.glue_type]}"


def write_script(glue_dir: Path, script: GlueScript) -> Path:
    """Write the source file once (atomically) and drop older versions of the same job."""
    path = script_path(glue_dir, script)
    if path.exists():
        return path
    glue_dir.mkdir(parents=True, exist_ok=True)
    for old in glue_dir.glob(f"{script.job_id}_*"):
        if old.name.split("_", 1)[0] == str(script.job_id):
            old.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=glue_dir, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(script.source)
        os.chmod(tmp, 0o700)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


async def run_script(
    script: GlueScript, glue_dir: Path, ctx: JobContext, *, kill_grace_s: float = 2.0
) -> tuple[int, str | None]:
    """Run one script GLUE call; returns (handleCode, handleMsg)."""
    interpreter = interpreter_for(script.glue_type)
    if interpreter is None:
        return 500, f"glueType[{script.glue_type}] cannot run: interpreter not found on this executor's PATH."
    path = write_script(glue_dir, script)
    ctx.write("jobring.executor.glue#run_script", 0, f"----------- script file:{path} -----------")
    argv = [interpreter, str(path), ctx.params, str(ctx.shard_index), str(ctx.shard_total)]
    try:
        code, _ = await run_streaming(argv, on_line=ctx.write_raw, kill_grace_s=kill_grace_s)
    except OSError as exc:
        return 500, f"script could not start: {exc}"
    if code == 0:
        return 200, None
    return 500, f"script exit value({code}) is failed"
