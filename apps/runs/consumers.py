"""The live run page's websocket: /ws/runs/<id>/ joins the Channels group `run-<id>`.

Messages are JSON with a `type` of status, metric, sample or review, published by the
DjangoSink (apps/runs/sink.py) and the Run's status changes through ``publish()``, i.e.
`group_send(..., {"type": "run.message", "data": ...})`. On connect the consumer first sends
the run's current status, so a page that (re)connects knows where it stands.
"""
import logging

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import get_channel_layer

log = logging.getLogger("selfplay.runs")


def group_name(run_id: int) -> str:
    return f"run-{run_id}"


def publish(run_id: int, data: dict) -> bool:
    """Send ``data`` to everyone watching run ``run_id``; False (logged, never raised) when Redis is away."""
    try:
        layer = get_channel_layer()
        if layer is None:
            return False
        async_to_sync(layer.group_send)(group_name(run_id), {"type": "run.message", "data": data})
        return True
    except Exception as exc:  # a Redis outage must never stop a run or a request
        log.warning("could not publish to run-%s: %s", run_id, exc)
        return False


@database_sync_to_async
def _snapshot(run_id: int) -> dict | None:
    from apps.runs.models import Run

    run = Run.objects.filter(pk=run_id).values("status", "current_step", "requested", "error").first()
    if run is None:
        return None
    return {"type": "status", "status": run["status"], "step": run["current_step"],
            "requested": run["requested"], "error": run["error"], "snapshot": True}


class RunConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.run_id = int(self.scope["url_route"]["kwargs"]["run_id"])
        self.group = group_name(self.run_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        snapshot = await _snapshot(self.run_id)
        if snapshot is not None:
            await self.send_json(snapshot)

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_message(self, event):
        await self.send_json(event["data"])
