"""The live run page's websocket: /ws/runs/<id>/ joins the Channels group `run-<id>`.

On connect the consumer sends the run's current status and message counter (`seq`), so a page that
(re)connects knows where it stands. After that it relays the group's messages, already encoded as
JSON by ``publish()`` (apps/runs/live.py), to its socket with no database work and no re-encoding (a message
with an ``admin_text``, a checkpoint's whole path, sends that to an admin's socket and ``text`` to the others);
a viewer that falls too far behind is closed and catches up from the metrics API.
"""
import json
import logging

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from apps.accounts.roles import can, server_path
from apps.runs.live import current_progress, current_seq, group_name
from apps.runs.models import Run

log = logging.getLogger("selfplay.runs")

# A viewer whose socket drains slower than the run publishes (a stalled tab) would grow its in-memory
# queue without bound in the pub/sub layer: past this many waiting messages it is closed, and the page
# reconnects and catches up from Postgres.
BACKLOG_LIMIT = 2000
SLOW_VIEWER_CLOSE = 4408


@database_sync_to_async
def _is_admin(user) -> bool:
    return can(user, "control_any_run")


@database_sync_to_async
def _snapshot(run_id: int, user) -> dict | None:
    run = Run.objects.filter(pk=run_id).values("status", "current_step", "requested", "error", "checkpoint_path").first()
    if run is None:
        return None
    return {"type": "status", "status": run["status"], "step": run["current_step"],
            "requested": run["requested"], "error": run["error"],
            "checkpoint": server_path(run["checkpoint_path"], user),  # the folder's name, the whole path for admins
            "progress": current_progress(run_id) if run["status"] == "running" else None,
            "snapshot": True, "seq": current_seq(run_id)}


class RunConsumer(AsyncWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.group = group_name(self.run_id)
        self.admin = await _is_admin(user)  # a message with an admin_text (a checkpoint's whole path) sends that
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        snapshot = await _snapshot(self.run_id, user)
        if snapshot is not None:
            await self.send(text_data=json.dumps(snapshot))

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def dispatch(self, message):
        """A run message goes straight to ``run_message``: Channels' own dispatch first hops to a
        worker thread to close stale database connections, for every message of every viewer (one
        thread shared by the whole process: 2,000 hops/s for 200 viewers at 10 messages/s, the
        queue where live messages waited for seconds). No database is used on this path."""
        if message.get("type") == "run.message":
            await self.run_message(message)
        else:
            await super().dispatch(message)

    def backlog(self) -> int:
        """Messages waiting in the layer for this viewer (0 where the layer does not say)."""
        queue = getattr(self.channel_layer, "channels", {}).get(self.channel_name)
        return queue.qsize() if queue is not None else 0

    async def run_message(self, event):
        if self.backlog() > BACKLOG_LIMIT:
            log.info("closing a slow viewer of run %s (%d messages waiting)", self.run_id, self.backlog())
            await self.close(code=SLOW_VIEWER_CLOSE)
            return
        text = event.get("admin_text") if getattr(self, "admin", False) and event.get("admin_text") else event.get("text")
        await self.send(text_data=text if text is not None else json.dumps(event["data"]))
