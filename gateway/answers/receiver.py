"""The gateway's end of Envoy's gRPC access-log service: every entry of the answer log becomes an `Answer`
in the store. It is served on the xDS gRPC server (gateway/app.py), where the proxies' access log points
(gateway/envoy/answer_log.py).

An entry that cannot be read is counted and logged, and the stream goes on. The picker log
(`names.PICKER_LOG`: the requests the picker this gateway serves for its own Envoy picked, an entry as
each ends, gateway/envoy/picker_checks.py) is not an answer: each entry's `x-request-id` goes to
`picks_ended`. A stream from another log (another name than these, or `names.SHADOW_LOG` for mirrored
copies) is read to its end and ignored. Nothing here answers Envoy but the
stream's close: Envoy never waits on it.

Only the replica that leads keeps answers: the leader alone judges the rollout. A follower refuses a
stream (UNAVAILABLE), and a replica that stops leading closes the ones it holds at their next message, so
Envoy reopens them where its bootstrap's leader cluster now leads (gateway/envoy/bootstrap.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable

import grpc
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc

from gateway import names
from gateway.answers import telemetry
from gateway.answers.capture import digested
from gateway.answers.entries import Placement, answer_from
from gateway.answers.store import AnswerStore

log = logging.getLogger(__name__)


FOLLOWING = "this gateway replica does not lead the rollout: answers go to the leader"


class AnswerReceiver(als_pb2_grpc.AccessLogServiceServicer):
    def __init__(
        self,
        store: AnswerStore,
        leading: Callable[[], bool] = lambda: True,
        digests_only: Callable[[], bool] = lambda: False,
        placement: Placement | None = None,
        picks_ended: Callable[[str], None] | None = None,
    ) -> None:
        """`placement`: the answers come from the user's own gateway (issue 36), placed by it.
        `picks_ended`: told the `x-request-id` of each entry of the picker log (`names.PICKER_LOG`), the
        requests the picker this gateway serves picked, as each ends (gateway/epp/held.py)."""
        self.store = store
        self.leading = leading
        self.digests_only = digests_only  # `analysis.quality.keep: digest`: no captured text is kept
        self.placement = placement
        self.picks_ended = picks_ended

    def register(self, server: grpc.aio.Server) -> None:
        als_pb2_grpc.add_AccessLogServiceServicer_to_server(self, server)

    async def StreamAccessLogs(
        self,
        request_iterator: AsyncIterator[als_pb2.StreamAccessLogsMessage],
        context: grpc.aio.ServicerContext,
    ) -> als_pb2.StreamAccessLogsResponse:
        log_name = names.ANSWER_LOG
        if not self.leading():
            await context.abort(grpc.StatusCode.UNAVAILABLE, FOLLOWING)
        async for message in request_iterator:
            if not self.leading():
                await context.abort(grpc.StatusCode.UNAVAILABLE, FOLLOWING)
            if message.HasField("identifier"):
                log_name = message.identifier.log_name
            if log_name == names.PICKER_LOG and self.picks_ended is not None:
                for entry in message.http_logs.log_entry:
                    if entry.request.request_id:
                        self.picks_ended(entry.request.request_id)
            elif log_name in (names.ANSWER_LOG, names.SHADOW_LOG):
                for entry in message.http_logs.log_entry:
                    self.take(entry, shadow=log_name == names.SHADOW_LOG)
        return als_pb2.StreamAccessLogsResponse()

    def take(self, entry: accesslog_pb2.HTTPAccessLogEntry, shadow: bool = False) -> None:
        now = time.time()
        try:
            answer = answer_from(entry, shadow, self.placement)
        except Exception as error:  # bad input is counted, never fatal to the stream
            log.warning("unreadable access-log entry (%s: %s)", type(error).__name__, error)
            self.store.ignore(now, unreadable=True)
            telemetry.RECEIVED.labels("unreadable").inc()
            return
        if answer is None:
            self.store.ignore(now)
            telemetry.RECEIVED.labels("ignored").inc()
            return
        if answer.captured and self.digests_only():
            answer = digested(answer)
        evicted = self.store.counts.evicted
        self.store.add(answer, now)
        telemetry.RECEIVED.labels("kept").inc()
        telemetry.record(answer)
        telemetry.EVICTED.inc(self.store.counts.evicted - evicted)
