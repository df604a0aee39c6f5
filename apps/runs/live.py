"""Live publishing: one message to everyone watching a run's page (the Channels group `run-<id>`).

``publish(run_id, data)`` encodes the JSON once and sends the finished text as one group message
(`{"type": "run.message", "text": ...}`), which the websocket consumer (apps/runs/consumers.py)
writes to each viewer's socket as it is. Every message carries `seq`, the run's message counter (a
Redis INCR): a page that stays connected but sees a number skipped (the channel layer drops messages
that waited too long) refetches what it missed from the metrics API. A Redis outage is logged and
returned as False, never raised: it must not stop a run or a request.

Publishers: the run's status changes (apps/runs/models.py), the DjangoSink's flushes, checkpoints
and step phases (apps/runs/sink.py) and review events (apps/review). A step's newest phase
(``progress``: rollout / update) is also kept in Redis, for a page that connects mid-step.
"""
from __future__ import annotations

import json
import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger("selfplay.runs")

SEQ_TTL_SECONDS = 7 * 24 * 3600  # a run's counter outlives pauses; it restarts (and pages catch up) after a week idle
_redis_clients: dict = {}


def group_name(run_id: int) -> str:
    return f"run-{run_id}"


def seq_key(run_id: int) -> str:
    return f"selfplay:run-seq:{run_id}"


def _redis():
    """A (cached) Redis client on the channel layer's Redis, whatever settings currently say."""
    import redis
    from django.conf import settings

    host = settings.CHANNEL_LAYERS["default"].get("CONFIG", {}).get("hosts", [settings.REDIS_URL])[0]
    url = host if isinstance(host, str) else host.get("address", settings.REDIS_URL)
    if url not in _redis_clients:
        _redis_clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    return _redis_clients[url]


def next_seq(run_id: int) -> int:
    client = _redis()
    pipe = client.pipeline(transaction=True)
    pipe.incr(seq_key(run_id))
    pipe.expire(seq_key(run_id), SEQ_TTL_SECONDS)
    return int(pipe.execute()[0])


def current_seq(run_id: int) -> int | None:
    """The run's message counter now (0 before the first message); None when Redis does not answer."""
    try:
        return int(_redis().get(seq_key(run_id)) or 0)
    except Exception as exc:
        log.info("could not read the message counter of run-%s: %s", run_id, exc)
        return None


def progress_key(run_id: int) -> str:
    return f"selfplay:run-progress:{run_id}"


def remember_progress(run_id: int, data: dict) -> None:
    """Keep a run's newest ``progress`` message (rollout / update of a step) for pages that connect later."""
    try:
        _redis().set(progress_key(run_id), json.dumps(data), ex=SEQ_TTL_SECONDS)
    except Exception as exc:  # never stops a run
        log.info("could not keep the progress of run-%s: %s", run_id, exc)


def current_progress(run_id: int) -> dict | None:
    """The newest ``progress`` message of a run, or None (none yet, or Redis does not answer)."""
    try:
        raw = _redis().get(progress_key(run_id))
    except Exception as exc:
        log.info("could not read the progress of run-%s: %s", run_id, exc)
        return None
    return json.loads(raw) if raw else None


def publish(run_id: int, data: dict, admin: dict | None = None) -> bool:
    """Send ``data`` (plus `seq`) to everyone watching run ``run_id``; False (logged, never raised) when Redis is away.

    ``admin``: fields that admins' sockets get instead (a checkpoint's whole path, where ``data`` has its folder's
    name): the message then carries both texts, with one `seq`, and the consumer picks the one for its viewer."""
    try:
        layer = get_channel_layer()
        if layer is None:
            return False
        seq = next_seq(run_id)
        message = {"type": "run.message", "text": json.dumps({**data, "seq": seq})}
        if admin:
            message["admin_text"] = json.dumps({**data, **admin, "seq": seq})
        async_to_sync(layer.group_send)(group_name(run_id), message)
        return True
    except Exception as exc:  # a Redis outage must never stop a run or a request
        log.warning("could not publish to run-%s: %s", run_id, exc)
        return False
