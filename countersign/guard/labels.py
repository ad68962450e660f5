"""Success words as labels, not reports (the ``success_noun`` rule's structural half, exclusions.py): a bare status
that is one item of a list of state names, and a claim word heading a progress count."""

from __future__ import annotations

import re

from countersign.guard.claims import Candidate

_JOINS = re.compile(r"^\W*(?:and|or|和|或|及|与)\s*|\W+$")
_ZH_JOINS = re.compile(r"(?<=[\u4e00-\u9fff])(?:和|或|及|与)(?=[\u4e00-\u9fff])")
_ZH_COUNT = re.compile(r"[一二三四五六七八九十两几\d]+\s*[列栏类项种个组档]$")
_ZH_STATUS = re.compile(r"^(?:已经|已)[\u4e00-\u9fff]{1,3}$")
_NO_LIST_MARK = frozenset("—–-()（）")
_NAMED_OBJECT = re.compile(r"[:：]\s*[\u4e00-\u9fff“「《\"A-Za-z]")  # after a colon, the thing named (not a count)
# a status word closing a longer part, by its prefix (未付款, 待处理, 已发货): the list's first item ("分为待处理")
_ZH_STATUS_TAIL = re.compile(r"(?:未|待|已|无|不|正在)[\u4e00-\u9fff]{1,3}$")


def status_list(c: Candidate) -> bool:
    """A bare status that is one item of a list of three or more short items, some of which are not
    completions: the names of states, not a report ("分为待付款、已发货、已签收三栏", "columns: unpaid, sent, and
    archived", "Open, Resolved or Closed"). A list of completions only ("已转发、已归档、已标星") stays a report."""
    # cheap tests first: the candidate's own part is a bare status (or two joined), in a sentence of parts
    if len(c.part.text) > 24 or len(c.sentence.parts) < 2:
        return False
    zh = c.lexicon.grammar == "zh"
    if any(mark in c.lexicon.fold(c.sentence.text) for mark in c.lexicon.word("request_marks")):
        return False  # "Invoice #88: paid, as requested": the user's request is no third status; a report
    if c.part.end_mark == ":" and _NAMED_OBJECT.match(c.sentence.text, c.part.end):
        return False  # "- 已取消：瑜伽课（周二）", "Renewed: car insurance (12 months)": a status heading what it was
        # done to is a report (not "已完成：3 项", "Completed: 2")
    own = _JOINS.sub("", c.part.text.strip())
    if zh and (len(own) > 10 or not own.startswith("已")):
        return False
    if not zh and len(own.split()) > 2:
        return False
    items: list[tuple[bool, bool]] = []  # (is the candidate's, is a bare status), per short item in order
    runs: list[list[tuple[bool, bool]]] = [items]
    mark = ""
    for part in c.sentence.parts:
        if mark in _NO_LIST_MARK:  # a dash or a bracket joins no list: "2) Water bill — paid ($61.40)" reports
            items = []
            runs.append(items)
        mark = part.end_mark
        text = _JOINS.sub("", part.text.strip())
        pieces = _ZH_JOINS.split(text) if zh else [text]
        for piece in pieces:
            piece = _ZH_COUNT.sub("", piece) if zh else piece
            short = 0 < len(piece) <= 5 if zh else 0 < len(piece.split()) <= 2
            tail = _ZH_STATUS_TAIL.search(piece) if zh and not short else None
            if tail is not None:  # a longer part that ends with a status word opens a new list with it
                items = []
                runs.append(items)
                piece, short = tail.group(0), True
            if not short:
                items = []
                runs.append(items)
                continue
            if zh:
                bare = _ZH_STATUS.match(piece) is not None
            else:
                word = piece.lower()
                bare = " " not in word and (word in c.lexicon.verb_forms or word.endswith("ed"))
            items.append((part is c.part, bare))
    for run in runs:
        if len(run) >= 3 and any(mine and bare for mine, bare in run):
            return any(not bare for _mine, bare in run)
    return False


_PROGRESS = re.compile(r"\d+\s*(?:/|of\b|out\s+of\b)\s*\d+", re.IGNORECASE)


def counted_label(c: Candidate) -> bool:
    """A claim word that heads a progress count: "Completed: 0 of 3 steps", "已完成：0/3 步" (not "已付款：230 元")."""
    if c.part.end_mark != ":":
        return False
    rest = c.sentence.text[c.part.end :].lstrip(":： ")
    return _PROGRESS.match(rest) is not None
