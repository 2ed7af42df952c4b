"""The settings machinery shared by the admin and the executor (pydantic-settings).

A settings class lists its fields with types, defaults and constraints; :meth:`SettingsBase.load`
builds it from, highest first: explicit values (CLI options, constructor arguments), the
environment (the class's ``env_prefix``; a nested table's keys as ``PREFIX<TABLE>__<KEY>``),
a TOML table, then the defaults. Constructing a settings class directly uses only its
arguments and defaults, never the environment. An invalid value is a :class:`ConfigError`
naming the field and where the value came from.
"""

from __future__ import annotations

import json
import os
import tomllib
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from jobring.errors import JobringError


class ConfigError(JobringError, ValueError):
    """A setting that cannot be used; the message names it."""


LOG_FORMATS = ("plain", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass(frozen=True)
class _Sources:
    environ: Mapping[str, str]
    file_values: Mapping[str, Any]


# Set only while load() builds settings: direct construction must not read the environment.
_SOURCES: ContextVar[_Sources | None] = ContextVar("jobring_settings_sources", default=None)


class _MappingEnvSource(EnvSettingsSource):
    """The environment source, reading a given mapping (tests pass their own) instead of os.environ."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ  # before super().__init__, which loads the variables
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        if self.case_sensitive:
            return dict(self._environ)
        return {key.lower(): value for key, value in self._environ.items()}


class _TableSource(PydanticBaseSettingsSource):
    """The values of a TOML table (already read and checked by :func:`read_toml_table`)."""

    def __init__(self, settings_cls: type[BaseSettings], values: Mapping[str, Any]) -> None:
        super().__init__(settings_cls)
        self._values = dict(values)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


def _accepts(annotation: Any, kind: type) -> bool:
    if annotation is kind:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return kind in get_args(annotation)
    return False


class SettingsBase(BaseSettings):
    """Frozen settings built by :meth:`load`; see the module docstring."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", case_sensitive=False)

    # Fields whose TOML array is kept as JSON text rather than joined with commas.
    _json_fields: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources = _SOURCES.get()
        if sources is None:
            return (init_settings,)
        return (
            init_settings,
            _MappingEnvSource(settings_cls, sources.environ),
            _TableSource(settings_cls, sources.file_values),
        )

    @model_validator(mode="before")
    @classmethod
    def _text_forms(cls, data: Any) -> Any:
        """The forms the hand-written loaders accepted: an empty text unsets an optional
        text setting; a TOML array is a comma list (or JSON text); a number given for a
        text setting is its text."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, field in cls.model_fields.items():
            if name not in out or not _accepts(field.annotation, str):
                continue
            value = out[name]
            if isinstance(value, str) and value.strip() == "" and _accepts(field.annotation, type(None)):
                out[name] = None
            elif isinstance(value, list) and name in cls._json_fields:
                out[name] = json.dumps(value)
            elif isinstance(value, list):
                out[name] = ",".join(str(item) for item in value)
            elif isinstance(value, int | float) and not isinstance(value, bool):
                out[name] = str(value)
        return out

    @classmethod
    def load(
        cls,
        *,
        environ: Mapping[str, str],
        file_values: Mapping[str, Any] | None = None,
        file_name: str = "config file",
        explicit: Mapping[str, Any] | None = None,
        explicit_name: str = "option",
    ) -> Self:
        """Build from explicit values > ``environ`` > ``file_values`` > defaults."""
        given = {k: v for k, v in (explicit or {}).items() if v is not None}
        with _loading(_Sources(environ, file_values or {})):
            try:
                return cls(**given)
            except ValidationError as exc:
                where = _Origin(cls, environ, file_values or {}, file_name, given, explicit_name)
                raise ConfigError(describe(exc, where)) from None


@contextmanager
def _loading(sources: _Sources) -> Iterator[None]:
    token = _SOURCES.set(sources)
    try:
        yield
    finally:
        _SOURCES.reset(token)


@dataclass(frozen=True)
class _Origin:
    """Says where the value of a field came from, for error messages."""

    cls: type[SettingsBase]
    environ: Mapping[str, str]
    file_values: Mapping[str, Any]
    file_name: str
    explicit: Mapping[str, Any]
    explicit_name: str

    def of(self, loc: tuple[str | int, ...]) -> str | None:
        if not loc or not isinstance(loc[0], str):
            return None
        name = loc[0]
        if name in self.explicit:
            return self.explicit_name
        prefix = str(self.cls.model_config.get("env_prefix", ""))
        delimiter = self.cls.model_config.get("env_nested_delimiter") or ""
        wanted = [prefix + name]
        if delimiter and len(loc) > 1:
            wanted.insert(0, prefix + delimiter.join(str(part) for part in loc))
        upper = {key.upper(): key for key in self.environ}
        for candidate in wanted:
            if candidate.upper() in upper:
                return upper[candidate.upper()]
        if name in self.file_values:
            return self.file_name
        return None


_FRIENDLY = {
    "bool_parsing": "expected true/false",
    "bool_type": "expected true/false",
    "int_parsing": "expected an integer",
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "float_parsing": "expected a number",
    "float_type": "expected a number",
    "extra_forbidden": "unknown setting",
}


def describe(exc: ValidationError, where: _Origin | None = None) -> str:
    """One line per invalid field: ``name: problem, got value (from SOURCE)``."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        name = ".".join(str(part) for part in loc)
        kind = error["type"]
        if kind in ("greater_than", "greater_than_equal") and isinstance(error.get("ctx"), dict):
            bound = error["ctx"].get("gt", error["ctx"].get("ge"))
            if kind == "greater_than_equal":
                problem = f"must be at least {bound}"
            else:
                problem = "must be positive" if bound == 0 else f"must be above {bound}"
        elif kind == "value_error":
            problem = str(error["msg"]).removeprefix("Value error, ")
        else:
            problem = _FRIENDLY.get(kind, str(error["msg"]))
        # A check that names the part itself (``name.0.url: ...``) is not prefixed again.
        text = f"{name}: {problem}" if name and not problem.startswith((f"{name}.", f"{name}:")) else problem
        if kind not in ("value_error", "extra_forbidden", "missing") and "input" in error:
            text += f", got {error['input']!r}"
        source = where.of(loc) if where is not None else None
        if source:
            text += f" (from {source})"
        lines.append(text)
    return "; ".join(lines)


def read_toml_table(
    path: str | os.PathLike[str], table: str, skip: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """The ``[table]`` of a TOML file, or its top level when it has no such table (keys in
    ``skip`` left out); ConfigError when the file cannot be read or parsed."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from exc
    section = data.get(table, data)
    if not isinstance(section, dict):
        raise ConfigError(f"config file {path}: [{table}] must be a table")
    return {key: value for key, value in section.items() if key not in skip}


def check_known(cls: type[BaseModel], values: Mapping[str, Any], source: str) -> None:
    """ConfigError for a key of ``values`` that is not a field of ``cls``."""
    for key in values:
        if key not in cls.model_fields:
            raise ConfigError(f"{source}: unknown setting {key!r}")


def check_log_settings(log_format: str, log_level: str) -> None:
    """Raise ConfigError for an unknown log format or level."""
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"log_format: expected plain or json, got {log_format!r}")
    if log_level.upper() not in LOG_LEVELS:
        raise ConfigError(f"log_level: expected one of {', '.join(LOG_LEVELS)}, got {log_level!r}")


MIN_METRICS_TOKEN = 16


def check_metrics_token(token: str | None) -> None:
    """A metrics token, when set, must be at least 16 characters (a guessable one is refused).
    The executor's check; the admin's is in its secret policy (``--insecure`` applies)."""
    if token is not None and len(token.strip()) < MIN_METRICS_TOKEN:
        raise ConfigError(f"metrics_token: use at least {MIN_METRICS_TOKEN} random characters")
