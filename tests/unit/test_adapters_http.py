"""The HTTP adapter against real downstreams (docs/design.md §8, issue 11 items 1-4).

Every answer is read to its end under a cap, whatever TCP segments, chunks or encodings it arrives in;
an answer that is cut, oversize, unreadable or lacks a declared receipt field is UNKNOWN RECEIPT_INVALID
for a write (a clear failure for a read), never SUCCEEDED with empty fields. No redirect is followed.
No argument changes a URL's path shape. A prepared resource version travels as If-Match.
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.parse
from collections import UserDict
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from countersign import registry
from countersign.adapters import http
from countersign.adapters.base import CallMeta, Kind, LookupKind
from countersign.registry import Registry
from countersign.registry.model import ReceiptSpec
from countersign.testing.downstreams import Raw, Seen, answer, registry_doc

KEY = "a" * 32
META = CallMeta(idempotency_key=KEY, policy_version="adapters.1")


@pytest.fixture
async def adapter() -> AsyncIterator[http.HttpAdapter]:
    a = http.HttpAdapter()
    yield a
    await a.close()


def tools(base: str, **overrides: dict[str, Any]) -> Registry:
    return registry.build(registry_doc(base, **overrides), "adapters.yaml")


async def create(adapter: http.HttpAdapter, raw: Raw, tool: str = "create_thing") -> Any:
    return await adapter.execute(tools(raw.url).tools[tool], {"title": "t"}, META, 2.0)


# -- item 1: read to the end, under a cap ------------------------------------------------------------


@pytest.mark.parametrize("how", ["two segments", "many segments", "chunked", "gzip in segments", "chunked gzip"])
async def test_a_201_in_several_segments_is_read_whole(raw: Raw, adapter: http.HttpAdapter, how: str) -> None:
    body = json.dumps({"id": "t_1", "version": 3, "title": "t", "pad": "x" * 3000})
    raw.script = {
        "two segments": lambda s: answer(201, body, split=(7,), pause=0.1),
        "many segments": lambda s: answer(201, body, split=tuple(range(1, len(body), 97)), pause=0.002),
        "chunked": lambda s: answer(201, body, split=(1, 50, 2000), chunked=True),
        "gzip in segments": lambda s: answer(201, body, split=(5, 20), gzipped=True),
        "chunked gzip": lambda s: answer(201, body, split=(3, 30), chunked=True, gzipped=True),
    }[how]
    outcome = await create(adapter, raw)
    assert (outcome.kind, outcome.resource_id, outcome.resource_version) == (Kind.SUCCEEDED, "t_1", "3")
    assert outcome.body["pad"] == "x" * 3000


async def test_a_large_read_reaches_the_caller_whole(raw: Raw, adapter: http.HttpAdapter) -> None:
    todos = [{"id": f"t_{i}", "title": "买牛奶" * 10} for i in range(1500)]
    body = json.dumps({"todos": todos}, ensure_ascii=False).encode()
    assert len(body) > 130_000
    raw.script = lambda s: answer(200, body, split=(100, 60_000), pause=0.05)
    outcome = await adapter.execute(tools(raw.url).tools["read_things"], {"q": "all"}, CallMeta(), 2.0)
    assert outcome.kind is Kind.SUCCEEDED
    assert outcome.body == {"todos": todos}


BROKEN: dict[str, Any] = {
    "empty": lambda s: answer(201, b""),
    "not JSON": lambda s: answer(201, b"<html>created</html>"),
    "cut short": lambda s: answer(201, json.dumps({"id": "t_1", "version": 1}), length=400),
    "oversize by Content-Length": lambda s: answer(201, b"{}", length=http.MAX_ANSWER_BYTES + 1),
    "oversize, chunked": lambda s: answer(
        201, json.dumps({"id": "t_1", "pad": "x" * http.MAX_ANSWER_BYTES}), split=(10, 500_000), chunked=True
    ),
    "gzip bomb": lambda s: answer(
        201, json.dumps({"id": "t_1", "pad": "0" * (8 * http.MAX_ANSWER_BYTES)}), gzipped=True
    ),
    "a list": lambda s: answer(201, [{"id": "t_1", "version": 1}]),
    "id missing": lambda s: answer(201, {"version": 1}),
    "id empty": lambda s: answer(201, {"id": "", "version": 1}),
    "id null": lambda s: answer(201, {"id": None, "version": 1}),
    "id an object": lambda s: answer(201, {"id": {"x": 1}, "version": 1}),
    "version missing": lambda s: answer(201, {"id": "t_1"}),
    "nested too deep": lambda s: answer(201, "[" * 100_000 + "]" * 100_000),
}


@pytest.mark.parametrize("how", list(BROKEN))
async def test_an_unusable_2xx_to_a_write_is_unknown_receipt_invalid(
    raw: Raw, adapter: http.HttpAdapter, how: str
) -> None:
    raw.script = BROKEN[how]
    outcome = await create(adapter, raw)
    assert (outcome.kind, outcome.reason) == (Kind.UNKNOWN, "RECEIPT_INVALID"), outcome
    assert outcome.resource_id == ""
    assert len(raw.seen) == 1


async def test_a_tool_that_declares_no_receipt_accepts_an_empty_2xx(raw: Raw, adapter: http.HttpAdapter) -> None:
    raw.script = lambda s: answer(204, b"")
    outcome = await create(adapter, raw, "create_plain")
    assert outcome.kind is Kind.SUCCEEDED
    raw.script = lambda s: answer(200, b"not json")
    assert (await create(adapter, raw, "create_plain")).reason == "RECEIPT_INVALID"


@pytest.mark.parametrize("how", ["not JSON", "oversize by Content-Length", "oversize, chunked", "cut short"])
async def test_an_unusable_answer_to_a_read_is_a_clear_failure(raw: Raw, adapter: http.HttpAdapter, how: str) -> None:
    raw.script = BROKEN[how]
    outcome = await adapter.execute(tools(raw.url).tools["read_things"], {"q": "x"}, CallMeta(), 2.0)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, "DOWNSTREAM_ANSWER_INVALID"), outcome
    assert outcome.message


@pytest.mark.parametrize("how", ["id missing", "not JSON", "cut short", "oversize by Content-Length"])
async def test_an_applied_lookup_without_the_receipt_fields_is_no_verdict(
    raw: Raw, adapter: http.HttpAdapter, how: str
) -> None:
    raw.script = BROKEN[how]
    tool = tools(raw.url).tools["create_thing"]
    for fence in (False, True):
        found = await adapter.lookup(tool, META, fence, 2.0)
        assert found.kind is LookupKind.UNREADABLE, found
    raw.script = lambda s: answer(200, {"id": "t_9", "version": 2}, split=(4,))
    found = await adapter.lookup(tool, META, False, 2.0)
    assert found.kind is LookupKind.APPLIED and found.outcome is not None
    assert (found.outcome.kind, found.outcome.resource_id) == (Kind.SUCCEEDED, "t_9")


async def test_an_unusable_2xx_to_prepare_issues_no_card(raw: Raw, adapter: http.HttpAdapter) -> None:
    from countersign.adapters.base import PrepareUnavailable

    tool = tools(raw.url).tools["set_thing"]
    for how in ("not JSON", "cut short", "oversize, chunked", "a list"):
        raw.script = BROKEN[how]
        with pytest.raises(PrepareUnavailable):
            await adapter.prepare(tool, {"id": "t_1", "status": "done"}, META, 2.0)


# -- item 2: no redirect is followed -----------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_never_followed(
    raw: Raw, adapter: http.HttpAdapter, elsewhere: tuple[str, list[str]], status: int
) -> None:
    there, seen = elsewhere
    raw.script = lambda s: answer(status, {"moved": True}, headers={"Location": f"{there}/stolen"})
    reg = tools(raw.url)
    write = await adapter.execute(reg.tools["create_thing"], {"title": "t"}, META, 2.0)
    assert (write.kind, write.reason) == (Kind.UNKNOWN, "DOWNSTREAM_REDIRECT"), write
    read = await adapter.execute(reg.tools["read_things"], {"q": "x"}, CallMeta(), 2.0)
    assert (read.kind, read.reason) == (Kind.FAILED, "DOWNSTREAM_REDIRECT"), read
    for fence in (False, True):
        assert (await adapter.lookup(reg.tools["create_thing"], META, fence, 2.0)).kind is LookupKind.UNREADABLE
    from countersign.adapters.base import PrepareRefused

    with pytest.raises(PrepareRefused) as info:
        await adapter.prepare(reg.tools["set_thing"], {"id": "t_1", "status": "done"}, META, 2.0)
    assert info.value.reason == "DOWNSTREAM_REDIRECT"
    assert seen == [], "the server the redirect named saw nothing"
    assert len(raw.seen) == 5


# -- item 3: no argument changes the path's shape (the adapter's own defence) ------------------------


@pytest.mark.parametrize(
    "value",
    [
        "",
        ".",
        "..",
        "a/b",
        "../x",
        "%2e%2e",
        "%2E",
        "a%2Fb",
        "..\\",
        "a\\b",
        "%252e%252e",
        "x\r\nHost: evil",
        "x" * 5000,
    ],
)
async def test_the_adapter_sends_no_request_whose_path_an_argument_would_change(
    raw: Raw, adapter: http.HttpAdapter, value: str
) -> None:
    reg = tools(raw.url)
    outcome = await adapter.execute(reg.tools["delete_thing"], {"id": value}, META, 2.0)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, "URL_UNSAFE"), outcome
    outcome = await adapter.execute(reg.tools["set_thing"], {"id": value, "status": "done"}, META, 2.0)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, "URL_UNSAFE"), outcome
    assert raw.seen == []


@pytest.mark.parametrize(
    ("value", "target"),
    [
        ("t 1", "/things/t%201/status"),
        ("a?b#c", "/things/a%3Fb%23c/status"),
        ("买", "/things/%E4%B9%B0/status"),
        ("a.b", "/things/a.b/status"),
        ("...", "/things/.../status"),
        ("%41", "/things/%2541/status"),
        ("a;b=c&d", "/things/a%3Bb%3Dc%26d/status"),
    ],
)
async def test_every_other_value_is_percent_encoded_into_one_segment(
    raw: Raw, adapter: http.HttpAdapter, value: str, target: str
) -> None:
    raw.script = lambda s: answer(200, {"id": "t_1"})
    outcome = await adapter.execute(tools(raw.url).tools["set_thing"], {"id": value, "status": "done"}, META, 2.0)
    assert outcome.kind is Kind.SUCCEEDED, outcome
    assert [s.target for s in raw.seen] == [target]


async def test_a_query_value_is_percent_encoded_and_may_be_anything(raw: Raw, adapter: http.HttpAdapter) -> None:
    raw.script = lambda s: answer(200, {"things": []})
    reg = tools(raw.url)
    for value in ("", "..", "a/b&c=d#e"):
        outcome = await adapter.execute(reg.tools["read_things"], {"q": value}, CallMeta(), 2.0)
        assert outcome.kind is Kind.SUCCEEDED
    assert [s.target for s in raw.seen] == ["/things?q=", "/things?q=..", "/things?q=a%2Fb%26c%3Dd%23e"]


# -- item 4: If-Match ----------------------------------------------------------------------------------


def _if_match(seen: Seen) -> str | None:
    return seen.headers.get("if-match")


async def test_the_prepared_version_travels_as_if_match_and_a_412_is_a_version_conflict(
    raw: Raw, adapter: http.HttpAdapter
) -> None:
    reg = tools(raw.url)
    raw.script = lambda s: answer(412, {"reason": "SOMETHING_ELSE", "message": "stale"})
    meta = CallMeta(idempotency_key=KEY, if_match="7")
    outcome = await adapter.execute(reg.tools["set_thing"], {"id": "t_1", "status": "done"}, meta, 2.0)
    assert (outcome.kind, outcome.reason, outcome.retryable) == (Kind.FAILED, "RESOURCE_VERSION_CONFLICT", False)
    raw.script = lambda s: answer(200, {"id": "t_1"})
    await adapter.execute(reg.tools["set_thing"], {"id": "t_1", "status": "done"}, META, 2.0)
    assert [_if_match(s) for s in raw.seen] == ['"7"', None]


@pytest.mark.parametrize("version", ['a"b', "a b", "a\r\nX-Evil: 1", "版本", 'W/"1"', "x" * 300])
async def test_a_version_that_cannot_be_an_entity_tag_is_never_sent(
    raw: Raw, adapter: http.HttpAdapter, version: str
) -> None:
    meta = CallMeta(idempotency_key=KEY, if_match=version)
    outcome = await adapter.execute(tools(raw.url).tools["set_thing"], {"id": "t_1", "status": "d"}, meta, 2.0)
    assert (outcome.kind, outcome.reason) == (Kind.FAILED, "RESOURCE_VERSION_INVALID"), outcome
    assert raw.seen == []


async def test_a_request_the_client_cannot_build_is_failed_not_not_sent(raw: Raw, adapter: http.HttpAdapter) -> None:
    # NOT_SENT gives the card back (READY, the same token retries); a request that can never be built would fail
    # the same way on every retry until the card expired, so it settles FAILED with a reason of its own
    meta = CallMeta(idempotency_key=KEY, tenant_id="t\r\nX-Evil: 1")  # past policy.check_context only by hand
    outcome = await adapter.execute(tools(raw.url).tools["create_thing"], {"title": "t"}, meta, 2.0)
    assert (outcome.kind, outcome.reason, outcome.retryable) == (Kind.FAILED, "REQUEST_NOT_BUILDABLE", False)
    assert raw.seen == []


async def test_each_call_keeps_its_own_deadline_on_one_adapter(raw: Raw, adapter: http.HttpAdapter) -> None:
    # one ClientTimeout per deadline is reused: a short deadline must not become a long one's, nor the reverse
    body = json.dumps({"id": "t_1", "version": 1})
    raw.script = lambda s: answer(201, body, split=(5,), pause=0.4)
    thing = tools(raw.url).tools["create_thing"]
    for deadline, kind in ((2.0, Kind.SUCCEEDED), (0.2, Kind.UNKNOWN), (2.0, Kind.SUCCEEDED), (0.2, Kind.UNKNOWN)):
        outcome = await adapter.execute(thing, {"title": "t"}, META, deadline)
        assert outcome.kind is kind, (deadline, outcome)  # past the short deadline the body is cut: UNKNOWN


# -- the same, through the sidecar: what the agent and the user see ------------------------------------


# -- siblings of reading whole: what the sidecar keeps and sends must still fit ----------------------------


@pytest.mark.parametrize("value", [3, -7, 2**70, 0, True, False, 1.5, [1, "a"], {"b": 2}, "v-3", ""])
def test_a_receipt_field_reads_as_json_writes_it_unless_it_is_a_string(value: object) -> None:
    from countersign.adapters.base import field_of

    expected = value if isinstance(value, str) else json.dumps(value)
    assert field_of({"version": value}, "version") == expected
    assert field_of({"a": {"version": value}}, "a.version") == expected
    assert field_of({"version": None}, "version") == field_of({}, "version") == ""


# -- one walk per receipt field: the same verdict and the same fields as the two functions it replaces -----------


def _old_receipt_problem(receipt: ReceiptSpec, body: Any) -> str:
    """receipt_problem as it was before receipt_fields (main at 1498405), the reference the new one must equal."""
    for name in ("resource_id", "resource_version"):
        if name not in receipt.declared:
            continue
        path = getattr(receipt, name)
        value: Any = body
        for part in path.split("."):
            if not isinstance(value, Mapping) or part not in value:
                value = None
                break
            value = value[part]
        if not (
            (isinstance(value, str) and value) or (isinstance(value, (int, float)) and not isinstance(value, bool))
        ):
            return f"the answer lacks the receipt field {path!r} (a non-empty string or number)"
    return ""


def _old_field_of(body: Any, path: str) -> str:
    value = body
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return ""
        value = value[part]
    if value is None:
        return ""
    if type(value) is int:
        return str(value)
    return value if isinstance(value, str) else json.dumps(value)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["id", "v", "a", "x"]), inner),
    max_leaves=12,
)
_PATHS = st.sampled_from(["id", "v", "a.id", "a.v", "x.a.id", "missing", "a"])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=_JSON | st.dictionaries(st.sampled_from(["id", "v", "a", "x"]), _JSON),
    id_path=_PATHS,
    version_path=_PATHS,
    declared=st.sets(st.sampled_from(["resource_id", "resource_version"])),
)
@example(body={"id": "t_1", "v": 1}, id_path="id", version_path="v", declared={"resource_id", "resource_version"})
@example(body={"id": "", "v": True}, id_path="id", version_path="v", declared={"resource_version"})
@example(body=UserDict({"id": 7}), id_path="id", version_path="v", declared={"resource_id"})
def test_receipt_fields_read_what_receipt_problem_and_field_of_read(
    body: Any, id_path: str, version_path: str, declared: set[str]
) -> None:
    from countersign.adapters.base import field_of, receipt_fields, receipt_problem

    receipt = ReceiptSpec(resource_id=id_path, resource_version=version_path, declared=frozenset(declared))
    tool = dataclasses.replace(tools("http://127.0.0.1:9").tools["create_thing"], receipt=receipt)
    old = (_old_receipt_problem(receipt, body), _old_field_of(body, id_path), _old_field_of(body, version_path))
    assert receipt_fields(tool, body) == old
    assert receipt_problem(tool, body) == old[0]
    assert (field_of(body, id_path), field_of(body, version_path)) == old[1:]


def _old_render_url(template: str, values: Mapping[str, Any]) -> str:
    """render_url as it was (main at 1498405), without its early return for a template with nothing to fill."""
    from countersign.adapters.base import NotSendable
    from countersign.registry.templates import PLACEHOLDER, path_problem, path_span, text_of

    start, end = path_span(template)

    def one(match: re.Match[str]) -> str:
        text = text_of(values.get(match.group(1)))
        if start <= match.start() < end:
            problem = path_problem(text)
            if problem:
                raise NotSendable("URL_UNSAFE", f"{{{match.group(1)}}}: {problem}")
        return urllib.parse.quote(text, safe="")

    return PLACEHOLDER.sub(one, template)


_URL_PARTS = st.sampled_from(["http://", "h:8081", "/todos", "/", "?q=", "#f", "%2E", "..", "{", "}", "{id}", "a"])


@settings(max_examples=500, deadline=None)
@given(template=st.lists(_URL_PARTS | st.text(max_size=3), max_size=8).map("".join), value=_JSON)
@example(template="http://127.0.0.1:8081/todos", value="x")
@example(template="http://h/{id}/x?{id}", value="../a")
def test_a_url_is_rendered_as_before_whether_or_not_it_has_anything_to_fill(template: str, value: Any) -> None:
    from countersign.adapters.base import NotSendable, render_url

    values = {"id": value, "a": value}
    try:
        expected: object = _old_render_url(template, values)
    except NotSendable as exc:
        expected = ("refused", exc.message)
    try:
        got: object = render_url(template, values)
    except NotSendable as exc:
        got = ("refused", exc.message)
    assert got == expected


@settings(max_examples=400, deadline=None)
@given(_JSON | st.dictionaries(st.text(max_size=4), _JSON))
def test_a_request_body_has_the_bytes_json_dumps_wrote_for_it(value: Any) -> None:
    assert http._JSON_BODY.encode(value) == json.dumps(value, ensure_ascii=False)
