"""The reply guard as the sidecar serves it (issue 14): CheckReply over real gRPC on loopback, with real Redis,
its settings, its metric and its decision log."""

from __future__ import annotations

import argparse
import json
import logging
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from countersign.errors import SettingsError
from countersign.sidecar import app, settings
from countersign.testing.calls import ctx
from countersign.testing.stack import Stack
from countersign.v1 import guard_pb2, guard_pb2_grpc

REPLY = "好的，订单已经帮你取消了，退款三天内到账。"


async def _sidecar(stack: Stack, **overrides: str) -> app.Sidecar:
    s = settings.Settings(
        registry=str(stack.registry),
        listen="127.0.0.1:0",
        redis_url=stack.redis.info["url"],
        metrics_listen="127.0.0.1:0",
        keys_file=str(stack.keys),
        **overrides,
    ).validate()
    return await app.start(s)


@pytest.fixture
async def sidecar(stack: Stack) -> AsyncIterator[app.Sidecar]:
    running = await _sidecar(stack)
    yield running
    await running.stop(grace=1)


async def _check(sidecar: app.Sidecar, text: str, locale: str = "zh-CN") -> guard_pb2.CheckReplyResponse:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = guard_pb2_grpc.ReplyGuardServiceStub(channel)
        return await stub.CheckReply(
            guard_pb2.CheckReplyRequest(context=ctx(request_id=uuid.uuid4().hex, locale=locale), reply_text=text)
        )


def _flagged(sidecar: app.Sidecar) -> float:
    with urllib.request.urlopen(f"http://{sidecar.metrics_address}/metrics", timeout=10) as resp:
        scrape = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in scrape.splitlines()
        if line.startswith('countersign_reply_guard_total{verdict="flagged"}')
    )


async def test_a_replaced_reply_names_the_clause_and_the_rule(sidecar: app.Sidecar) -> None:
    got = await _check(sidecar, REPLY)
    assert got.verdict == guard_pb2.GUARD_VERDICT_REPLACED and got.reason.startswith("NO_SUCCEEDED_RECEIPT:")
    assert [(c.clause, c.rule, c.verb, c.verb_class, c.lexicon) for c in got.claims] == [
        ("订单已经帮你取消了", "completion_aspect", "取消", "generic", "zh")
    ]
    assert list(got.matched_claims) == ["订单已经帮你取消了"]


async def test_a_set_aside_candidate_is_reported_with_its_rule(sidecar: app.Sidecar) -> None:
    got = await _check(sidecar, "The order was never cancelled.", locale="en")
    assert got.verdict == guard_pb2.GUARD_VERDICT_PASSED and got.reason.startswith("NO_CLAIM:")
    assert [(e.rule, e.cue) for e in got.exclusions] == [("negation", "never")]


async def test_an_unsupported_language_is_flagged_and_counted(sidecar: app.Sidecar) -> None:
    before = _flagged(sidecar)
    got = await _check(sidecar, "Ich habe die Bestellung storniert.", locale="de-DE")
    assert got.verdict == guard_pb2.GUARD_VERDICT_PASSED and got.reply_text == "Ich habe die Bestellung storniert."
    assert got.reason.startswith("UNSUPPORTED_LANGUAGE:") and got.unsupported_language == "de"
    assert _flagged(sidecar) == before + 1


async def test_guard_unsupported_replace_replaces_it(stack: Stack) -> None:
    strict = await _sidecar(stack, guard_unsupported="replace")
    try:
        got = await _check(strict, "注文をキャンセルしました。", locale="en")
        assert got.verdict == guard_pb2.GUARD_VERDICT_REPLACED and got.unsupported_language == "ja"
        assert "注文" not in got.reply_text and got.reason.startswith("UNSUPPORTED_LANGUAGE:")
    finally:
        await strict.stop(grace=1)


async def test_the_decision_log_names_the_rule_and_keys_a_hash_of_the_clause(
    sidecar: app.Sidecar, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="countersign.continuations")
    await _check(sidecar, REPLY)
    events = [json.loads(r.getMessage()) for r in caplog.records if '"event": "guard"' in r.getMessage()]
    assert events and events[-1]["claims"][0]["rule"] == "completion_aspect"
    assert events[-1]["claims"][0]["clause_hmac"].count(".") == 1  # <kid>.<mac>: only a key holder can test a guess
    assert all("订单" not in r.getMessage() for r in caplog.records)


async def test_a_broken_lexicon_stops_the_start_naming_the_file(stack: Stack, tmp_path: Path) -> None:
    (tmp_path / "en.yaml").write_text(
        "language: en\ngrammar: en\nclaims:\n  x: ['(unclosed']\nreplacement:\n"
        "  NO_SUCCEEDED_RECEIPT: a\n  CLAIM_CONTRADICTS_RECEIPT: b\n",
        encoding="utf-8",
    )
    with pytest.raises(SettingsError, match=r"--guard-lexicon: en.yaml: claims.x\[0\]: bad regex"):
        await _sidecar(stack, guard_lexicon=str(tmp_path))


def test_the_guard_unsupported_setting_is_checked() -> None:
    args = argparse.Namespace(guard_unsupported=None)
    parsed = settings.from_args(args, {"COUNTERSIGN_REGISTRY": "r.yaml", "COUNTERSIGN_GUARD_UNSUPPORTED": "replace"})
    assert parsed.guard_unsupported == "replace"
    assert settings.Settings(registry="r.yaml").validate().guard_unsupported == "flag"
    with pytest.raises(SettingsError, match="--guard-unsupported must be flag or replace"):
        settings.Settings(registry="r.yaml", guard_unsupported="ignore").validate()


VETOED = "你的车在安联投了保，到五月。"  # the rules replace it; the packaged veto sets it aside (p < t)


async def test_the_learned_veto_is_on_by_default_and_explained(
    sidecar: app.Sidecar, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="countersign.continuations")
    got = await _check(sidecar, VETOED)
    assert got.verdict == guard_pb2.GUARD_VERDICT_PASSED and got.reply_text == VETOED
    assert got.reason.startswith("NO_CLAIM:") and "veto" in got.reason and "< t=0.16" in got.reason
    assert [e.rule for e in got.exclusions][-1] == "veto" and not got.claims
    events = [json.loads(r.getMessage()) for r in caplog.records if '"event": "guard"' in r.getMessage()]
    assert events[-1]["claims"][0]["rule"] == "veto" and events[-1]["claims"][0]["t"] == "0.16"
    assert all("手机" not in r.getMessage() for r in caplog.records)


async def test_guard_veto_off_gives_the_rules_verdict(stack: Stack) -> None:
    plain = await _sidecar(stack, guard_veto="off")
    try:
        got = await _check(plain, VETOED)
        assert got.verdict == guard_pb2.GUARD_VERDICT_REPLACED and got.reason.startswith("NO_SUCCEEDED_RECEIPT:")
    finally:
        await plain.stop(grace=1)
