"""The context managers that make a span current (observability/tracing.py makes the spans): InSpan for a span of
the SDK's, Dropped for a root the ratio dropped, NO_SPAN for no span at all; and the recorded-span mark beside
OTel's context."""

from __future__ import annotations

import contextvars
import types

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode


class InSpan:
    """``with`` it: the span is the current one inside the block and ended after it. What the SDK's
    ``start_as_current_span`` does (its two generator context managers: ``start_as_current_span`` and ``use_span``),
    in one object. An exception leaving the block sets the span's status to ERROR when ``errors`` (the SDK's
    ``set_status_on_exception``, same description), and is never recorded as an event (``record_exception=False``
    on every span of ours)."""

    __slots__ = ("_errors", "_mark", "_token", "span")

    def __init__(self, span: Span, errors: bool) -> None:
        self.span = span
        self._errors = errors

    def __enter__(self) -> Span:
        span = self.span
        self._token = context_api.attach(trace.set_span_in_context(span))
        self._mark = _recorded.set(span if span.is_recording() else None)
        return span

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        try:
            _recorded.reset(self._mark)
        except ValueError:  # left in another context than it was entered in (OTel's detach logs that case)
            _recorded.set(None)
        context_api.detach(self._token)
        span = self.span
        if self._errors and isinstance(exc, Exception) and span.is_recording():
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end()


class NoSpan:
    """``with`` it: nothing is made current (the current span stays what it was) and INVALID_SPAN is given."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return trace.INVALID_SPAN

    def __exit__(self, *_: object) -> None:
        return None


NO_SPAN = NoSpan()


class DroppedSpan(trace.NonRecordingSpan):
    """A root span the ratio dropped (tracing._root_span): the SDK's NonRecordingSpan, with its trace id and its
    flags' traceparent tail (``-00``) as plain attributes, for the traceparent every downstream hop under it is
    given (tracing.outgoing_headers: no SpanContext property read)."""

    trace_id = 0
    tail = ""


class Dropped:
    """``with`` it: InSpan for a DroppedSpan, without what that span never needs: no is_recording(), no end()
    (a no-op), no status; the recorded-span mark set only if there is one to hide (none under a server span)."""

    __slots__ = ("_mark", "_token", "span")

    def __init__(self, span: Span) -> None:
        self.span = span

    def __enter__(self) -> Span:
        self._token = context_api.attach(trace.set_span_in_context(self.span))
        self._mark = None if _recorded.get() is None else _recorded.set(None)
        return self.span

    def __exit__(self, *_: object) -> None:
        if self._mark is not None:
            try:
                _recorded.reset(self._mark)
            except ValueError:  # left in another context than it was entered in, as InSpan
                _recorded.set(None)
        context_api.detach(self._token)


# The current span when it is recorded, else None: what ``trace.get_current_span().is_recording()`` answers, kept
# beside OTel's context by InSpan (every span of the sidecar is made current by it), read in one ContextVar.get
# instead of ~4.8k instructions (the context lookup and an ABC isinstance). Asked ~8 times per call.
_recorded: contextvars.ContextVar[Span | None] = contextvars.ContextVar("countersign_recorded_span", default=None)
recorded = _recorded  # read by metrics' timed(): no stage span, nor a call to make none, under a dropped trace
