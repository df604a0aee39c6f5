"""The live run page's websocket: /ws/runs/<id>/ joins the Channels group `run-<id>`.

Messages are JSON with a `type` of status, metric, sample or review, published by the
DjangoSink (apps/runs/sink.py) through `group_send(..., {"type": "run.message", "data": ...})`.
"""
from channels.generic.websocket import AsyncJsonWebsocketConsumer


def group_name(run_id: int) -> str:
    return f"run-{run_id}"


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

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def run_message(self, event):
        await self.send_json(event["data"])
