"""The Chinese grammar of completion: aspect markers and result complements with any verb.

Chinese marks completion on the clause, not on the verb's form, so the grammar looks for the markers and
then checks that a verb (the verb table: every one- and two-character verb of a dictionary, plus
``verbs.extra``) stands where the marker needs one, and that the verb is no read or state verb (查看, 过期):

    已/已经 + (帮你|把…|被|成功…) + V     completion_aspect  "订单已经帮你取消了", "已被删除", "已成功转账"
    V + 好/完/掉/成/上/下来/出去… + 了      result_complement  "设置好了", "退掉了", "订下来了", "发出去了"
    V + 了 (a write verb)                 perfective_le      "撤回了", "删除了过期的优惠券", "订单取消咯" (咯/喽/啦 …
                                                               close a sentence as 了 does)
    把/将 … 了                             ba_construction    "我把例会挪到了周四"
    V + 成功/完成/完毕, 成功 + V             success_complement "缴纳成功", "上传完成", "成功取消 2 个订阅"
    V + 为/成 + 已X                         result_complement  "都设为已读了" (the verb before 为/成 acts)
    V + 为/成/到 + target (part's end)       result_complement  "地址更新为榆树街 22 号", "站会改成隔周一次": the
                                                               change and its target, no 了 (a report's headline)
    被 + V (+ 了)                          passive            "被删除了"; 被 + someone + V: OTHER
    phrase rules of the lexicon            colloquial_success "搞定", "妥了"; success_mark "✅"
The agent is the assistant when 我/我们 or a benefactive (帮你, 给你, 为你, 替你) stands before the claim;
the exclusions decide when it is the user or a third party (你昨天…, 小王已经…).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from countersign.guard.claims import ASSISTANT, NOBODY, OTHER, Candidate, Phrases
from countersign.guard.lexicon import Lexicon
from countersign.guard.segment import Part, Sentence
from countersign.guard.subject_zh import Subjects

_YI = re.compile(r"已经|已|刚刚|刚才|刚")
_ATTRIBUTIVE = re.compile(r"[^，。的你我他她您]{1,3}的(?![。！!，,]*$)")
_PARTICLE = re.compile("[了啦咯喽嘞啰]")
_FINAL = frozenset("了啦咯喽嘞啰")  # a sentence-final particle of a changed state: "订单取消咯", "发过去喽" (as 了)
_BA = re.compile(r"把|将(?![会要在近来于])")
_BA_CLOSE = re.compile("[了成为到]")  # where a 把 phrase's verb completes or names its target
_SUCCESS = re.compile(r"成功|完成|完毕")
_BEI = re.compile("被")
_HAN = re.compile(r"[\u3400-\u9fff]")
_COMPLEMENT_AFTER_VERB = re.compile('[上好完掉进出成到](?=[\u4e00-\u9fff“「"])')
_COVERBS = frozenset("和跟与同向对从往朝")
_NOT_BEFORE = frozenset("不没未")  # 没成功取消: the negation rule reads it, but no adverb claim is made of it
_COUNTED = re.compile(r"(?<![所还没])有\s*[\d一二两三四五六七八九十几多]")  # 有 3 项: what there is, counted
_STATE_WORD = re.compile(r"[\u4e00-\u9fff]{1,3}?(?=了|的|$|[^\u4e00-\u9fff])|[\u4e00-\u9fff]{1,3}")
_READS = frozenset("看读查听找搜翻")  # one-character read verbs: with a result complement still a read (看过, 读完)
_RESULT_OF_READ = frozenset("过完好到了清懂全对")  # a coverb phrase before the verb
# a part that goes on with the previous part's subject: 还/又/也/然后 ... with no subject of its own
_GOES_ON = re.compile(r"^\W*(?:还|又|也|并且|并|然后|接着|随后|之后|再|顺便|顺手)")
_SO = re.compile(r"^\W*(?:所以|因此|因而|于是|结果)(?!我)")
_PAST = re.compile("[了过]|已")
_MARKER_CHARS = re.compile("[已刚了啦咯喽嘞啰被把将成完为到在]")  # every marker _part looks for holds one of these
_MARKERS = re.compile(r"[已刚了啦咯喽嘞啰被把将为成到在]|完毕")  # 为成到在: V + 为/成/到 + target (_TARGET); one class
# a change and its target closing the part, no 了: "地址更新为榆树街 22 号", "例会改到周四下午" (the verb before it
# must be a two-character write verb of the table or one of ``words.target_verbs``: 改, 设, 调 ...)
_QUOTE_MARKS = re.compile(r"[“”「」『』《》\"]")
_QUOTED = re.compile(r"“[^”]{0,16}”|「[^」]{0,16}」|『[^』]{0,16}』|《[^》]{0,16}》|\"[^\"]{0,16}\"")
_TARGET = re.compile(r"(?<=[\u4e00-\u9fff])[为成到](?!已)(?=[^，,。！!？?；;了过吗呢]{1,24}[。！!]?\s*$)")
# (guard8) V在 + a time closing the part: an arrangement made for that time ("保养预约订在周六上午九点")
_AT_TIME = re.compile(
    r"(?<=[\u4e00-\u9fff])在(?=(?:每(?:年|个?月|周|星期|天)|[下这本]周|[下这本]个?月|明天|明早|明晚|后天|今天|今晚|(?:周|星期|礼拜)[一二三四五六日天末]"
    r"|[0-9０-９一二三四五六七八九十两]+\s*(?:月|号|日|点))(?![^，,。]*(?:生效|开始|结束|举行|进行|到期|截止))"
    r"[^，,。！!？?；;了过吗呢]{0,20}[。！!]?\s*$)"
)  # (not a when: 在本周期结束时生效, 定在周五举行)
_AT_TIME_NOT = frozenset("定放存在")  # 定在/放在: where a thing is or stands, not an act
_PLACE_HEADS, _PLACE_ENDS = frozenset("上下里外前后左右"), frozenset("面边方头")  # 下面, 上边, 下方, 里头: a place
_IN_REPLY = frozenset({"下面", "下方", "上面", "上方", "如下", "这里", "文末", "末尾"})  # places in the reply itself


def _names_target(text: str, after: int, verb: str) -> bool:
    """Whether the verb at ``text[after:]`` names a target after it (改成, 调到, 设为 + X): a 的 in X is X's."""
    return verb[-1:] in "成为到" or text[after + len(verb) : after + len(verb) + 1] in ("成", "为", "到")


class ChineseGrammar:
    def __init__(self, lex: Lexicon) -> None:
        self.lex = lex
        # a read or state verb, a thing's own change (化, 散) or a merchant's act (发货: "已发货" is not 已发 + 货) is a
        # verb too: it stops a scan
        self.verbs = lex.verb_lemmas | lex.not_writes | lex.changes | lex.others
        # a change the table does not list as a verb (化, 慢, 好) is no write either
        never = lex.not_writes | (lex.changes - lex.verb_lemmas)
        self.not_write = re.compile("|".join(sorted(map(re.escape, never), key=len, reverse=True)) or "(?!)")
        self.complements = tuple(sorted(lex.word("result_complements"), key=len, reverse=True))
        # the complements by their last character, in the order above: only those can end a text that ends with
        # that character (_particle asks which complement ends the text before 了); an empty one (which ends every
        # text, and sorts last) closes every list
        empty = ("",) if "" in self.complements else ()
        by_last: dict[str, tuple[str, ...]] = {}
        for comp in self.complements:
            if comp:
                by_last[comp[-1]] = (*by_last.get(comp[-1], ()), comp)
        self._complements_by_last = {last: comps + empty for last, comps in by_last.items()}
        self._no_complement = empty
        self.le_stoplist = lex.word("le_stoplist")
        self.skip = (
            re.compile(
                "(?:" + "|".join(sorted(map(re.escape, lex.word("after_yi_skip")), key=len, reverse=True)) + ")*"
            )
            if lex.word("after_yi_skip")
            else re.compile("")
        )
        self.phrases = Phrases(lex)
        self.subjects = Subjects(lex)
        self.target_verbs = lex.word("target_verbs")
        labels = "|".join(sorted(map(re.escape, lex.word("label_nouns")), key=len, reverse=True))
        # 已删除邮件占用了 2 GB: 已 + V + a noun, then the sentence's own verb: a label, not a report
        self.label = (
            re.compile(
                f"(?:{labels})(?:里|中|会|占|有|在|默认|显示|可以|都|只|保留|共|一共|列表|标签|分组|"
                "文件夹|页|栏|数量|数)(?![。！!\\s]*$)"  # (a label has a predicate after it: 已退订邮件列表。 reports)
            )
            if labels
            else re.compile("(?!)")
        )
        self.assistant = re.compile(
            "|".join(map(re.escape, sorted(lex.word("assistant_markers"), key=len, reverse=True))) or "(?!)"
        )

    def candidates(self, sentence: Sentence, words: Sequence[str] = ()) -> list[Candidate]:
        out: list[Candidate] = []
        rules = self.phrases.live(sentence)
        actor = ""  # a person the previous part opened with: "快递员打过电话，还发了短信" (the courier sent it)
        parts = sentence.parts
        for i, part in enumerate(parts):
            found = self._part(sentence, part) if _MARKER_CHARS.search(part.text) else []
            seen: set[tuple[int, int]] = set()
            for c in found:
                if (c.start, c.end) not in seen:
                    seen.add((c.start, c.end))
                    out.append(c)
            if rules:
                out.extend(self.phrases.candidates(sentence, part, self._agent(part.text, len(part.text)), rules))
            if actor:
                for c in out:
                    if c.part is part and c.agent != ASSISTANT and not c.subject:
                        c.agent, c.subject = OTHER, actor
            after = parts[i + 1].text if i + 1 < len(parts) else ""
            # (guard8) a consequence with no subject of its own (所以这单寄到了公司) after someone's past act
            # (你上周自己改过地址) is part of that report, as a part that goes on is
            if after and (_GOES_ON.match(after) or (_SO.match(after) and _PAST.search(part.text))):
                if not actor and not self.assistant.search(part.text):
                    actor = self.subjects.actor(part.text, self._verb_at)
            else:
                actor = ""
        return out

    def may_claim(self, text: str, words: Sequence[str] = ()) -> bool:
        """A cheap test: does ``text`` hold a completion marker or a phrase rule's match?"""
        return _MARKERS.search(text) is not None or any(rx.search(text) for _r, rx, _n in self.phrases.runnable(text))

    # -- pieces ------------------------------------------------------------------------------------

    def _verb_at(self, text: str, i: int) -> str:
        """The verb that starts at ``text[i]`` (two characters before one), or ""."""
        for n in (2, 1):
            word = text[i : i + n]
            if len(word) == n and word in self.verbs:
                return word
        return ""

    def _verb_before(self, text: str, j: int) -> str:
        """The verb that ends just before ``text[j]``, or ""."""
        for n in (2, 1):
            if j - n >= 0 and text[j - n : j] in self.verbs:
                return text[j - n : j]
        return ""

    def _is_write(self, verb_and_rest: str) -> bool:
        """Whether the verb that starts ``verb_and_rest`` is a write: no read or state verb starts there, or only
        a one-character one inside a longer verb of the table (升 is a state, 升级 an act)."""
        m = self.not_write.match(verb_and_rest)
        if m is None:
            return True
        two = verb_and_rest[:2]
        if two[:1] in _READS and two[1:] in _RESULT_OF_READ:
            return False  # 看过, 读完, 查好: a read verb with its result is still a read
        return len(m.group(0)) == 1 and two in self.lex.verb_lemmas and two not in self.lex.not_writes

    def _agent(self, text: str, upto: int) -> str:
        return ASSISTANT if self.assistant.search(text, 0, upto) else NOBODY

    def _cand(
        self,
        rule: str,
        sentence: Sentence,
        part: Part,
        s: int,
        e: int,
        verb: str,
        agent: str | None = None,
        flags: frozenset[str] = frozenset(),
    ) -> Candidate:
        subject = ""
        if agent is None:
            who = self.subjects.read(part.text, s, e, verb)
            agent, subject, flags = who.agent or self._agent(part.text, e), who.words, flags | who.flags
        return Candidate(rule, self.lex, sentence, part, part.start + s, part.start + e, verb, agent, subject, flags)

    def _part(self, sentence: Sentence, part: Part) -> list[Candidate]:
        text = part.text
        out: list[Candidate] = []
        for m in _YI.finditer(text):
            if m.group(0) == "已" and text[m.end() : m.end() + 1] == "经":
                continue
            if m.start() > 0 and text[m.start() - 1] in "为成" and m.group(0).startswith("已"):
                # 标记为已完成, 设成已读了: a state named as the object; the act is the verb before 为/成
                found = self._named_state(sentence, part, m.start() - 1, m.end())
                if found is not None:
                    out.append(found)
                continue
            after = m.end() + (self.skip.match(text, m.end()).end() - m.end())  # type: ignore[union-attr]
            if "被" in text[m.end() : after] and not self._verb_at(text, after):
                continue  # 已经被航空公司换到了 3A: 被 + someone, the passive rule reads who acted
            rest = text[after:]
            if not rest.strip("。！!~～ ") or rest[:1] in "，,":
                continue  # "已经。" says nothing
            if rest.startswith("在"):  # 已经在微信上 AA 了: a place, then the act; 已经在处理: still under way
                le = text.find("了", after)
                if le < 0:
                    continue
                out.append(self._cand("completion_aspect", sentence, part, m.start(), le + 1, rest[1:3]))
                continue
            if rest[:1] in _COVERBS and len(self._verb_at(text, after)) < 2:
                # 已经跟账号解绑, 已替您向物业报修: the act is the verb after the coverb's object (not 同步, 对上)
                le = text.find("了", after)
                tail = le + 1 if le >= 0 else len(text.rstrip("。！!~～ "))
                out.append(self._cand("completion_aspect", sentence, part, m.start(), tail, ""))
                continue
            disposal = bool(_BA.match(rest))  # 已把…/已将…: a disposal construction always has an act
            verb = "" if disposal else self._verb_at(text, after)
            if m.group(0).startswith("刚") and not (verb or disposal):
                continue  # 刚 is also "just now" before a noun: only with a verb it marks completion
            verb = verb or ("" if disposal else rest[:2])
            # (a skip word after 已 is no verb: 已经在线提交 is read at 提交, not at 在)
            if not disposal and not self._is_write(rest):
                continue
            # (a disposal's object is no modifier: 已把这周的课换到周四; nor a target's: 已经改成新的地址)
            modifier = not disposal and not _names_target(text, after, verb) and _ATTRIBUTIVE.match(text, m.end())
            flags = (
                frozenset({"attributive"})
                if modifier or (verb and self.label.match(text, after + len(verb)))
                else frozenset()
            )
            end = after + max(len(verb), 1)
            found = self._cand("completion_aspect", sentence, part, m.start(), end, verb, flags=flags)
            if disposal:  # the claim runs over the 把 phrase's object (who acts is read at 把) to its verb's 了
                # or target marker: the object is no cue after it (已经把通知静音到明早八点: 通知 is no next step), a
                # target no cue before it (把权限改成只有你能看: 能 names who may see)
                close = _BA_CLOSE.search(text, after + 1)
                if close is not None:
                    found.end = part.start + close.end()
            out.append(found)
        for pm in _PARTICLE.finditer(text):
            found = self._particle(sentence, part, pm.start())
            if found is not None:
                out.append(found)
        for m in _SUCCESS.finditer(text):
            verb = self._verb_before(text, m.start())
            if verb and verb not in ("操作",) and self._is_write(verb):
                out.append(self._cand("success_complement", sentence, part, m.start() - len(verb), m.end(), verb))
            elif m.group(0) == "成功" and not verb:
                # 成功 as an adverb before any write verb: "成功取消 2 个订阅", "已成功预约" (not 成功率, 成功的)
                after = self._verb_at(text, m.end())
                if after and self._is_write(text[m.end() :]) and text[m.start() - 1 : m.start()] not in _NOT_BEFORE:
                    out.append(self._cand("success_complement", sentence, part, m.start(), m.end() + len(after), after))
        if not out:
            for m in _TARGET.finditer(text):
                verb = self._verb_before(text, m.start())
                # V到 + a time is "until" unless V moves a time (改到周三, 推迟到): 维护到晚上十点 is a state
                moves = verb in self.target_verbs or verb[:1] in self.target_verbs or verb[-1:] in self.target_verbs
                moves = moves or m.group(0) != "到"
                known = len(verb) == 2 or verb in self.target_verbs
                if known and moves and self._is_write(text[m.start() - len(verb) :]):
                    # the claim runs to the part's end (the target is part of it): a cue anywhere in it is "before"
                    end = len(text.rstrip("。！! "))
                    out.append(self._cand("result_complement", sentence, part, m.start() - len(verb), end, verb))
                    break
        if not out and "在" in text:
            for m in _AT_TIME.finditer(text):
                verb = self._verb_before(text, m.start())
                one = verb in self.target_verbs and verb not in _AT_TIME_NOT
                if (one or len(verb) == 2) and self._is_write(text[m.start() - len(verb) :]):
                    end = len(text.rstrip("。！! "))
                    out.append(self._cand("result_complement", sentence, part, m.start() - len(verb), end, verb))
                    break
        for m in _BEI.finditer(text) if "被" in text else ():
            at = self.skip.match(text, m.end()).end()  # type: ignore[union-attr]  # 被成功删除: an adverb, no agent
            verb = self._verb_at(text, at)
            done = (
                "了" in text[m.end() :]
                or text[: m.start()].endswith(("已", "已经"))
                or not text[at + len(verb) :].strip("。！!，, ")
            )
            if not done:
                continue
            if verb:
                if self._is_write(text[at:]):
                    out.append(self._cand("passive", sentence, part, m.start(), at + len(verb), verb, NOBODY))
            else:
                agent = (
                    ASSISTANT
                    if text[m.end() : m.end() + 2] in ("我们", "我帮", "我给") or text[m.end() : m.end() + 1] == "我"
                    else OTHER
                )
                out.append(self._cand("passive", sentence, part, m.start(), len(text.rstrip("。！!")), "", agent))
        return out

    def _named_state(self, sentence: Sentence, part: Part, j: int, after: int) -> Candidate | None:
        """V + 为/成 + 已X: "都标成已读了", "三项任务标记为已完成" (the verb before 为/成 at ``text[j]`` acts; 已X at
        ``after`` names the state it set). A 的 after the state makes it a modifier ("设为已读的邮件")."""
        text = part.text
        verb = self._verb_before(text, j)
        if not verb or not self._is_write(text[j - len(verb) :]) or _COUNTED.search(text, 0, j - len(verb)):
            return None  # (有 3 项标记为已完成: a count of what is there, read, not an act)
        word = _STATE_WORD.match(text, after)
        end = word.end() if word else after
        end += text[end : end + 1] == "了"
        flags = frozenset({"attributive"}) if text[end : end + 1] == "的" else frozenset()
        return self._cand("result_complement", sentence, part, j - len(verb), end, verb, flags=flags)

    def _particle(self, sentence: Sentence, part: Part, k: int) -> Candidate | None:
        text = part.text
        if text[k + 1 : k + 2] in ("吗", "么", "解") or text[k : k + 2] == "了解":
            return None
        before = text[:k]
        for comp in self._complements_by_last.get(before[-1:], self._no_complement):
            if before.endswith(comp):
                j = k - len(comp)
                verb = self._verb_before(text, j)
                if verb and self._is_write(text[j - len(verb) :]):
                    return self._cand("result_complement", sentence, part, j - len(verb), k + 1, verb)
                if comp in ("到", "成", "上", "下") and _BA.search(before):
                    break  # "把例会挪到了": the 把 rule below
                if verb:
                    return None
        verb = self._verb_before(text, k)
        if (
            verb
            and (verb + text[k]) not in self.le_stoplist
            and text[k - 2 : k + 1] not in self.le_stoplist
            and self._is_write(text[k - len(verb) :])
            and text[k] == "了"
        ):
            return self._cand("perfective_le", sentence, part, k - len(verb), k + 1, verb)
        ba = _BA.search(before)
        if ba is not None and text[k] == "了":
            return self._cand("ba_construction", sentence, part, ba.start(), k + 1, "")
        if sentence.quotes and _QUOTE_MARKS.search(before):
            # a status named in quotes is no verb of this clause: "都移到“已完成”栏了" (移到 acts, not 完成)
            before = _QUOTED.sub(lambda q: "□" * len(q.group(0)), before)
            text = before + text[k:]
        if (
            text[k] in _FINAL
            and not text[k + 1 :].strip("。！!~～…. 哈呀哦喔噢嗷啊哟")
            and text[k - 1 : k + 1] not in self.le_stoplist
            and (text[k] == "了" or len(before.strip()) > 1 or text[k - 1] + "了" not in self.le_stoplist)
            and not _YI.search(before)
        ):
            # sentence-final 了 (a changed state) after a write verb phrase: "快递单号发你邮箱了"; a verb with its
            # result complement earlier in the phrase decides first: "照片都加上定位了"
            for cm in _COMPLEMENT_AFTER_VERB.finditer(before):
                head = self._verb_before(text, cm.start())
                # (a target named by 成/为 may be long: 改成周一到周五全天了)
                near = k - cm.end() <= (10 if text[cm.start()] == "成" else 6)
                if head and self._is_write(text[cm.start() - len(head) :]) and near:
                    return self._cand("result_complement", sentence, part, cm.start() - len(head), k + 1, head)
            for j in range(k - 1, max(-1, k - 12), -1):
                verb = self._verb_at(text, j)
                if verb in _PLACE_HEADS and text[j + 1 : j + 2] in _PLACE_ENDS:
                    continue  # 列在下面了: 下面 is a place, not 下 (guard8)
                if j > 0 and len(self._verb_before(text, j + 1)) == 2:
                    j, verb = j - 1, text[j - 1 : j + 1]  # 清空啦: the two-character verb ends here, not 空
                if verb:  # the nearest verb decides: "会议已经开始十分钟了" is no act
                    if verb[-1:] == "在" and text[j + len(verb) : j + len(verb) + 2] in _IN_REPLY:
                        return None  # 列在下面了, 放在下方了: put in this reply, written nowhere else (guard8)
                    if verb in self.complements:  # 挪到后天了: 到 completes 挪
                        head = self._verb_before(text, j)
                        if not head and j > 1 and text[j - 1] in self.complements:
                            j -= 1  # 调高到 5 万了: a degree complement between the verb and 到 (guard7)
                            head = self._verb_before(text, j)
                        if head and self._is_write(text[j - len(head) :]):
                            return self._cand("result_complement", sentence, part, j - len(head), k + 1, head)
                    if self._is_write(text[j:]):
                        return self._cand("perfective_le", sentence, part, j, k + 1, verb)
                    break
        return None
