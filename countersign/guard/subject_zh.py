"""Who acts in a Chinese clause: the subject before a claim, read by animacy and transitivity.

Chinese puts the patient first as freely as the agent ("订单已经取消了": the order was cancelled; "房东已经签了
合同": the landlord signed), so the noun before the verb alone does not say who acted. Two signs together do:

- the subject is a person or an organisation: a word of ``words.agents`` (房东, 经理, 银行 ...) or one ending
  with a suffix of ``words.agent_suffixes`` (主办方, 水管工, 供应商), a name
  in Latin letters ("Dana"), or a transliterated name (every character one of ``words.name_chars``: 珍娜,
  卡洛斯, 艾哈迈德);
- and it acts on something: a disposal or benefactive coverb follows it (把/将/给/帮/为/替 ...), or the verb
  takes an object ("换了阀门", "交了工时表"), not a quantity or a place ("暂停了两个月", "挪到了周四").

Then the agent is ``OTHER`` (the other_agent exclusion). A subject that is a thing changing by itself
(``words.natural_subjects``: 雨, 气温, 油漆 ...) with a verb of ``verbs.changes`` (停, 降, 化, 干 ...) is a
state, not an act ("雨停了", "气温降到了零下"): flag ``event`` (the state exclusion). The assistant (我/我们)
is never set aside here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from countersign.guard.claims import OTHER
from countersign.guard.lexicon import Lexicon

# the subject ends where a coverb starts; these coverbs show it acts on something
_COVERB = re.compile(r"把|将(?![会要在近])|给|帮|为(?!止|了)|替|跟|和|与|向|对(?!方)|被|让|叫|由|在|从|往")
_ASPECT = re.compile(r"已经|已|刚刚|刚")
_ACTS_ON = frozenset("把将给帮为替跟和与向")
_TIME = (
    r"[0-9０-９一二两三四五六七八九十几半]+\s*(?:个)?\s*(?:小时|钟头|分钟|天|周|星期|礼拜|月|年|号|日|点)"
    r"(?:前|后|以前|之前|以后|之后|内|左右|多)?|[今昨前明后当每]天|[今昨]晚|今早|早上|上午|中午|下午|傍晚|晚上|夜里|"
    r"凌晨|半夜|前后|左右|周[一二三四五六日天末]|星期[一二三四五六日天]|[上下本这]周|[上下本这]个?月|今年|去年|"
    r"刚才|刚刚|刚|之前|此前|最近|一夜(?:之间)?|一早"
)
_LEAD = re.compile(
    r"^(?:好的|好嘞|好|嗯|哦|OK|ok|另外|此外|还有|顺便(?:说一下)?|对了|然后|接着|最后|首先|其次|"
    + _TIME
    + r"|[，,。！!：:\s])+"
)
_TRAIL = re.compile(
    r"(?:" + _TIME + r"|那边|这边|方面|已经|已|早就|早已|也|都|又|就|还|才|自己|亲自|一直|终于|"
    r"远程|手动|顺手|直接|刚好|再次|突然|[\s，,])+$"
)
_FAMILIAR = re.compile(r"(?!小票|小时|老家|小说)[小老阿][\u4e00-\u9fff]")
_LATIN_NAME = re.compile(r"[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?")
_NAMED = re.compile(  # a name closing a longer subject: 你的同事 Lily, 隔壁的小王
    r"[\u4e00-\u9fff]\s*[A-Z][a-z]+$|[\u4e00-\u9fff]的(?!小票|小时|老家|小说|小区)[小老][\u4e00-\u9fff]$"
)
_NOT_OBJECT = re.compile(
    r"[0-9０-９一二两三四五六七八九十几半好多]+\s*(?:个)?\s*"
    r"(?:次|遍|趟|下|回|天|周|星期|礼拜|年|月|小时|钟头|分钟|秒|会儿)"
    r"(?=[^\u4e00-\u9fff]|[了过的都也还才就吧呢啊啦哦呀吗]|$)|"  # (加了两次训练: a counted object, guard8)
    r"[到给在成为进回出上下去来]|[。！!？?，,、；;~…吗呢吧啊啦哦呀]"
)
_DIRECTIONAL = frozenset("进到给入至回在成为往")
_MOTION = frozenset("进入出上下回")  # a directional verb a manner of moving may head (漫进, 涌入)
_FINISHED = re.compile(r"[^，,。完]{0,6}完(?:了|毕|啦)")  # the claim's verb finishes an activity (批注完了)
_DONE = re.compile(r"^\s*[好完掉光齐妥]?[了过]?\s*")  # the result complement and aspect before an object
_HAN_OR_LATIN = re.compile(r"[\u3400-\u9fffA-Za-z“「《\"]")


@dataclass(frozen=True)
class Subject:
    agent: str = ""  # OTHER when a person or an organisation acts; "" when unknown
    words: str = ""  # the subject as written
    flags: frozenset[str] = frozenset()  # {"event"}: a thing that changes by itself


_NONE = Subject()


class Subjects:
    def __init__(self, lex: Lexicon) -> None:
        self.agents = _ending(lex.word("agents"))  # lexicon words are lower-cased: heads are matched lower-cased
        self.natural = _ending(lex.word("natural_subjects"))
        self.name_chars = frozenset("".join(lex.word("name_chars")))
        self.suffixes = frozenset(lex.word("agent_suffixes"))
        self.not_agents = _ending(lex.word("not_agents"))  # 会员 is a membership, not a member
        self.changes = lex.changes
        skip = sorted(lex.word("after_yi_skip"), key=len, reverse=True)  # 被自动删除, 被成功取消: no agent
        self.adverbs = re.compile("|".join(map(re.escape, skip)) or "(?!)")

    def read(self, text: str, start: int, end: int, verb: str) -> Subject:
        """The subject of the claim at ``text[start:end]`` (a clause part), with the verb the claim names."""
        stretch = text[:start]
        if not stretch or "我" in stretch:
            return _NONE
        coverb = _COVERB.search(stretch)
        if coverb is not None and coverb.group(0) == "被":
            agent = self.adverbs.sub("", _TRAIL.sub("", stretch[coverb.end() :]))
            if agent:
                return Subject(OTHER, agent)  # 卡被银行冻结了: the verb after 被 + someone is that one's act
        head = stretch[: coverb.start()] if coverb else stretch
        aspect = _ASPECT.search(head)  # the subject stands before 已经/刚: "场地方已经发邮件确认了日期"
        if aspect is not None:
            head = head[: aspect.start()]
        head = _TRAIL.sub("", _LEAD.sub("", head))
        if not head:
            return _NONE
        disposal = text.startswith(("把", "将"), start) or (coverb is not None and coverb.group(0) in "把将")
        # (a character the verb table lacks may head a directional verb: 湖水漫进了, the subject is 湖水; guard8)
        natural = self.natural.search(head) or (
            verb in _MOTION and len(head) > 2 and self.natural.search(_TRAIL.sub("", head[:-1]))
        )  # (河水夜里漫进了: a time word between them too)
        if (verb in self.changes or verb.rstrip("了啦") in self.changes or disposal) and natural:
            return Subject("", head, frozenset({"event"}))  # 雨停了; 大风把栅栏吹倒了: weather acts, no one did
        if not self._person(head):
            return _NONE
        acts_on = (coverb is not None and coverb.group(0) in _ACTS_ON) or text.startswith(("把", "将"), start)
        # (a person who finished an activity acted, object or not: 导师已经批注完了; guard8)
        finished = _FINISHED.match(text, start) is not None
        if acts_on or finished or self._object_after(text, start, end, verb):
            return Subject(OTHER, head)
        return _NONE

    def _person(self, head: str) -> bool:
        """Whether ``head`` names a person or an organisation."""
        suffixed = len(head) > 1 and head[-1] in self.suffixes and not self.not_agents.search(head)
        return bool(
            _FAMILIAR.fullmatch(head)  # 老王, 小李, 阿强: a person called by a familiar prefix
            or self.agents.search(head.lower())
            or suffixed
            or _LATIN_NAME.fullmatch(head)
            or _NAMED.search(head) is not None  # 你的同事 Lily, 隔壁的小王: a name closing the subject (guard8)
            or (2 <= len(head) <= 5 and self.name_chars.issuperset(head))
        )

    def actor(self, text: str, verb_at: Callable[[str, int], str]) -> str:
        """The person or organisation a clause part opens with, before its verb ("快递员打过电话", "房东来过一趟"),
        or "": a next part that goes on without a subject ("还发了短信") is theirs."""
        text = _LEAD.sub("", text)
        if "我" in text[:8]:
            return ""
        for i in range(1, min(len(text), 8)):
            if verb_at(text, i):
                head = text[:i]
                cut = _COVERB.search(head) or _ASPECT.search(head)  # the subject stands before 把/给/已经
                head = _TRAIL.sub("", head[: cut.start()] if cut else head)
                if head and self._person(head):
                    return head
        return ""

    @staticmethod
    def _object_after(text: str, start: int, end: int, verb: str) -> bool:
        """Whether an object follows the verb ("换了阀门"), not a duration, a place or the end ("暂停了两个月");
        after a directional verb (加进, 移到, 发给) what follows is a place or a recipient, not an object."""
        if verb[-1:] in _DIRECTIONAL or text[start:end].rstrip("了啦")[-1:] in _DIRECTIONAL:
            return False  # 拉进了视频会议: a place
        rest = _DONE.sub("", text[end:])
        return bool(rest) and _NOT_OBJECT.match(rest) is None and _HAN_OR_LATIN.match(rest) is not None


def _ending(words: frozenset[str]) -> re.Pattern[str]:
    """A regex for a text that ends with one of ``words`` (longest first)."""
    if not words:
        return re.compile(r"(?!)")
    return re.compile("(?:" + "|".join(map(re.escape, sorted(words, key=len, reverse=True))) + r")$")
