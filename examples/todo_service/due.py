"""Resolve a todo's ``dueAt`` into an ISO-8601 timestamp in the service's zone.

Accepted inputs: ISO-8601 timestamps (kept in their own offset, naive ones are read in
:data:`SERVICE_TZ`), and a handful of natural phrases relative to an injected "now":
``今晚 9 点``, ``今天下午 3 点半``, ``明天 9 点``, ``明天上午 9 点``, ``明天下午 3 点``, ``后天晚上 8 点``,
``3 小时后``, ``tonight 9pm``, ``today 5:30pm``, ``tomorrow 9am``, ``tomorrow at 3pm``,
``in 2 hours``, ``in 30 minutes``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

SERVICE_TZ = ZoneInfo("Asia/Shanghai")
"""The zone the service lives in (UTC+8); relative phrases are resolved in it."""

MAX_PAST = timedelta(minutes=5)
MAX_AHEAD = timedelta(days=366)

Clock = Callable[[], datetime]
"""A callable returning an aware ``datetime`` ("now")."""


def system_clock() -> datetime:
    return datetime.now(SERVICE_TZ)


class DueAtError(Exception):
    """A ``dueAt`` that cannot be used; ``reason`` is a stable machine-readable code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


UNPARSEABLE = "TODO_DUE_AT_UNPARSEABLE"
SUSPICIOUS = "TODO_DUE_AT_SUSPICIOUS"

_CN_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}

# day word -> (days from today, implied period)
_CN_DAYS: dict[str, tuple[int, str | None]] = {
    "今天": (0, None),
    "今日": (0, None),
    "今早": (0, "上午"),
    "今晚": (0, "晚上"),
    "明天": (1, None),
    "明日": (1, None),
    "明早": (1, "上午"),
    "明晚": (1, "晚上"),
    "后天": (2, None),
}
_CN_PM = {"下午", "晚上", "傍晚"}
_CN_NUM = r"\d{1,2}|[零〇一二两三四五六七八九十]{1,3}"
_CN_ABS = re.compile(
    rf"^(?P<day>{'|'.join(_CN_DAYS)})?"
    r"(?P<period>凌晨|早上|早晨|上午|中午|下午|傍晚|晚上)?"
    rf"(?P<hour>{_CN_NUM})[点點时時]"
    rf"(?:(?P<half>半)|(?P<minute>{_CN_NUM})分?)?$"
)
_CN_REL = re.compile(rf"^(?P<n>{_CN_NUM}|\d+)个?(?P<unit>小时|钟头|分钟|天)(?:之?后|以后)$")
_EN_ABS = re.compile(
    r"^(?P<day>today|tonight|tomorrow)\s*(?:at\s*)?(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>am|pm)?$"
)
_EN_REL = re.compile(r"^in\s*(?P<n>\d+)\s*(?P<unit>hours?|hrs?|h|minutes?|mins?|m|days?|d)$")


def _cn_number(text: str) -> int:
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        value = (_CN_DIGITS[tens] if tens else 1) * 10 + (_CN_DIGITS[ones] if ones else 0)
    else:
        value = 0
        for ch in text:
            value = value * 10 + _CN_DIGITS[ch]
    return value


def _at(day: datetime, days: int, hour: int, minute: int, original: str) -> datetime:
    if not (0 <= hour <= 23 and 0 <= minute <= 59):
        raise DueAtError(UNPARSEABLE, f"dueAt {original!r} names an impossible time of day")
    base = (day + timedelta(days=days)).replace(hour=hour, minute=minute, second=0, microsecond=0)
    # Re-attach the zone so a DST-free zone keeps its wall clock (Asia/Shanghai has none).
    return base.replace(tzinfo=SERVICE_TZ)


def _parse_iso(text: str) -> datetime | None:
    if not re.match(r"^\d{4}-\d{2}-\d{2}", text):
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=SERVICE_TZ)
    return parsed.replace(microsecond=0)


def parse_due_at(text: str, now: datetime) -> datetime:
    """Turn ``text`` into an aware datetime (seconds precision) relative to ``now``.

    Raises :class:`DueAtError` with reason ``TODO_DUE_AT_UNPARSEABLE`` when it is not understood.
    No window check is done here (see :func:`resolve_due_at`).
    """
    if now.tzinfo is None:
        raise ValueError("now must be an aware datetime")
    raw = text.strip()
    iso = _parse_iso(raw)
    if iso is not None:
        return iso
    local_now = now.astimezone(SERVICE_TZ)
    compact = re.sub(r"\s+", "", raw)
    m = _CN_ABS.match(compact)
    if m:
        days, implied = _CN_DAYS.get(m["day"] or "", (0, None))
        period = m["period"] or implied
        hour = _cn_number(m["hour"])
        minute = 30 if m["half"] else _cn_number(m["minute"]) if m["minute"] else 0
        if period == "晚上" and hour == 12:
            hour, days = 0, days + 1
        elif (period in _CN_PM and hour < 12) or (period == "中午" and hour < 6):
            hour += 12
        elif period == "凌晨" and hour == 12:
            hour = 0
        return _at(local_now, days, hour, minute, raw)
    m = _CN_REL.match(compact)
    if m:
        n = _cn_number(m["n"])
        unit = m["unit"]
        delta = timedelta(days=n) if unit == "天" else (timedelta(minutes=n) if unit == "分钟" else timedelta(hours=n))
        return (local_now + delta).replace(microsecond=0)
    lowered = " ".join(raw.lower().split())
    m = _EN_ABS.match(lowered)
    if m:
        hour = int(m["hour"])
        minute = int(m["minute"] or 0)
        ampm = m["ampm"] or ("pm" if m["day"] == "tonight" else None)
        if ampm is not None:
            if not 1 <= hour <= 12:
                raise DueAtError(UNPARSEABLE, f"dueAt {raw!r} names an impossible time of day")
            hour = hour % 12 + (12 if ampm == "pm" else 0)
        return _at(local_now, 1 if m["day"] == "tomorrow" else 0, hour, minute, raw)
    m = _EN_REL.match(lowered)
    if m:
        n = int(m["n"])
        unit = m["unit"][0]
        delta = {"h": timedelta(hours=n), "m": timedelta(minutes=n), "d": timedelta(days=n)}[unit]
        return (local_now + delta).replace(microsecond=0)
    raise DueAtError(UNPARSEABLE, f"cannot understand dueAt {raw!r}")


def resolve_due_at(text: str, now: datetime) -> datetime:
    """:func:`parse_due_at` plus the plausibility window (not >5 min past, not >366 days ahead)."""
    due = parse_due_at(text, now)
    if due < now - MAX_PAST:
        raise DueAtError(SUSPICIOUS, f"dueAt {text!r} resolves to {format_iso(due)}, which is in the past")
    if due > now + MAX_AHEAD:
        raise DueAtError(SUSPICIOUS, f"dueAt {text!r} resolves to {format_iso(due)}, more than 366 days ahead")
    return due


def format_iso(due: datetime) -> str:
    """ISO-8601 with seconds precision and offset, e.g. ``2026-11-30T21:00:00+08:00``."""
    return due.replace(microsecond=0).isoformat(timespec="seconds")


def format_local(due: datetime) -> str:
    """Human readable wall-clock time in the service zone, e.g. ``2026-11-30 21:00``."""
    return due.astimezone(SERVICE_TZ).strftime("%Y-%m-%d %H:%M")
