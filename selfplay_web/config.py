"""Reading settings from the environment, with errors that say what to fix.

Kept free of Django imports so that `manage.py services` and the test bootstrap can use it
before Django is configured.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import urlparse

BASE_DIR = Path(__file__).resolve().parent.parent


class SettingError(Exception):
    """A bad environment variable. The message names it and what is expected."""


def data_dir() -> Path:
    raw = os.environ.get("SELFPLAY_DATA_DIR", "").strip() or str(BASE_DIR / "var")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = (BASE_DIR / path).resolve()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingError(
            f"SELFPLAY_DATA_DIR={raw!r} cannot be created ({exc.strerror}); "
            "set it to a writable directory, e.g. SELFPLAY_DATA_DIR=./var"
        ) from exc
    return path


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise SettingError(f"{name}={raw!r} is not a boolean; use one of 1/0, true/false, yes/no, on/off")


def env_int(name: str, default: int, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{name}={raw!r} is not an integer") from None
    if value < minimum:
        raise SettingError(f"{name}={raw!r} must be at least {minimum}")
    return value


def check_url(name: str, schemes: tuple[str, ...]) -> str | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    parsed = urlparse(raw)
    if parsed.scheme not in schemes or not (parsed.hostname or parsed.path):
        example = {"DATABASE_URL": "postgres://user:pass@localhost:5432/selfplay",
                   "REDIS_URL": "redis://127.0.0.1:6379/0"}.get(name, f"{schemes[0]}://host")
        raise SettingError(
            f"{name}={raw!r} is not a valid URL: expected scheme {' or '.join(schemes)}, e.g. {example}"
        )
    return raw


def secret_key(debug: bool) -> str:
    key = os.environ.get("SECRET_KEY", "").strip()
    if key:
        return key
    if not debug and env_bool("SELFPLAY_PRODUCTION", False):
        raise SettingError("SECRET_KEY is not set; production needs an explicit SECRET_KEY")
    path = data_dir() / "secret_key"
    if not path.exists():
        try:  # created owner-only from the start (no moment where others can read it)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process wrote it meanwhile
            return path.read_text().strip()
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]", "testserver"}


def insecure_http(allowed_hosts: list[str]) -> bool:
    """Whether the server is served over plain HTTP (no Secure cookies, no https redirect, no HSTS).

    SELFPLAY_INSECURE_HTTP=1/0 decides; unset, it is plain HTTP only when ALLOWED_HOSTS names
    nothing but this machine (`make demo` on http://127.0.0.1:8000), else HTTPS is expected."""
    local = bool(allowed_hosts) and all(h.lower() in LOOPBACK_HOSTS for h in allowed_hosts)
    return env_bool("SELFPLAY_INSECURE_HTTP", local)


def embedded_pg_dir() -> Path:
    return data_dir() / "pg"


def embedded_database_url() -> str:
    """The URL of the embedded Postgres, written by `manage.py services start` (data_dir/pg.url)."""
    state = data_dir() / "pg.url"
    if state.exists():
        return state.read_text().strip()
    return f"postgresql://postgres@/selfplay?host={embedded_pg_dir()}"


def database_url() -> str:
    return check_url("DATABASE_URL", ("postgres", "postgresql", "pgsql")) or embedded_database_url()


def redis_url() -> str:
    return check_url("REDIS_URL", ("redis", "rediss", "unix")) or "redis://127.0.0.1:6379/0"


def redis_state_file() -> Path:
    return data_dir() / "redis" / "redis.url"


def resolved_redis_url() -> str:
    """REDIS_URL, else the server `services start` started for us, else the default port."""
    explicit = check_url("REDIS_URL", ("redis", "rediss", "unix"))
    if explicit:
        return explicit
    state = redis_state_file()
    if state.exists():
        return state.read_text().strip()
    return "redis://127.0.0.1:6379/0"
