"""Round 8 of the Chinese reply guard (notes/guard8zh.md): each class found in the misses of the spent held-out sets,
read by its structure, has a sentence written for it here that is read wrong without the class's rule.

Exclusion cues (a named rule sets the sentence aside; with that rule switched off it is a claim) and grammar rules
(the claim is read, or no claim is read, where round 7 read it the other way). Pure tests: no Redis, no gRPC.
"""

from __future__ import annotations

import pytest

from countersign.guard import ReplyGuard
from tests.unit.guard_rules import assert_rule_sets_aside


@pytest.fixture(scope="module")
def guard() -> ReplyGuard:
    return ReplyGuard.load()


# (rule, sentence): a claim when the rule is switched off, no claim with every rule on
RULE_CASES = [
    ("negation", "取件码输了两次都没打开柜门。"),  # tries counted, then denied in the same part
    ("instruction", "最好下班前把快递取了。"),  # advice: 最好 + the step the user had better take
    ("instruction", "最后点一下“提交”，申请就递上去了。"),  # a step word before a tap on a named button
    ("instruction", "你在网页上点“退订”就完成了。"),  # the user as the subject of the tap
    ("instruction", "打开钱包 → 银行卡，解绑就完事了。"),  # a sentence opening with a step, then 就 + done
    ("quotation", "账单页显示 已还清，那是上个月的事。"),  # a part of a screen shows it
    ("quotation", "车辆信息：年检已办理。"),  # a record's info heading
    ("success_noun", "已静音是群聊旁边的一个状态标签。"),  # a completion word named as a term with 是
    ("waiting_confirmation", "退款申请已排队，今天之内处理。"),  # queued is still waiting
    ("waiting_confirmation", "你同意以后，合同就签好了。"),  # after the user's consent
    ("state", "银行卡被冻结，扣款没有成功。"),  # the lock first, then the failure it caused
    ("state", "没法编辑这个表格，它被锁定了。"),  # the lock as the reason a try could not be done
    ("state", "湖水漫进了岸边的步道。"),  # water moving by itself (a natural subject, verbs.changes)
    ("time_anchor", "密码已修改，操作时间 2024-02-11。"),  # a record's own time field
    ("other_agent", "这份合同你周二就签了。"),  # the user with a day before the act
    ("other_agent", "你先生已经把机票订好了。"),  # a kinship word after 你 (words.agents)
    ("other_agent", "保洁阿姨在周末擦了两次窗户。"),  # a counted object is an object: the party acted on it
    ("other_agent", "你昨天自己退了这门课，所以学费退回来了。"),  # a consequence after someone's past act is theirs
    ("other_agent", "你的同事 Mia 已经把合同寄出去了。"),  # a name closing the subject (你的同事 Mia, 隔壁的小王)
    ("offer_plan", "例会本来要挪到周三，后来没挪。"),  # 本来要: what was going to happen
    ("other_agent", "我看到你今早自己把订阅退了。"),  # what the assistant saw the user do
    ("time_anchor", "2021 年 5 月，这个域名已经转出过。"),  # a date heading the sentence in a part of its own
    ("time_anchor", "这台路由器已经升级过三次。"),  # an experience counted (V过 + N 次): a record
    ("success_noun", "搞定这笔报销需要先补一张发票。"),  # a success word heading what it takes: a goal
    ("time_anchor", "- 12/01 已退款 ¥88"),  # a dated record line, the date right before 已
    ("other_agent", "✔ 续费视频会员（你自己续的）"),  # an attribution in brackets
    ("state", "水费似乎已经缴过了。"),  # a hedge before a completion no one is named for (gated)
    ("other_agent", "你的论文导师已经批注完了。"),  # a person who finished an activity acted, object or not
    ("instruction", "很简单，扫个码就办妥了。"),  # steps, then 就 + 办妥/办完/弄好/做完
]

# claims round 7 read as no claim: a setting's target, a 把 phrase's object, a label's missing predicate ...
CLAIMS = [
    "空调的定时改成晚上十点自动关机了。",  # 自动 inside the target of a setting names what the setting does
    "收货地址改成公司前台了。",  # a party after 成 is the target, not the subject
    "签名档已经改成新的了。",  # a 的 in a target is no modifier of the verb
    "会员暂停到明年三月份了。",  # a date after 到 is the target, no time anchor
    "已把明天的牙医预约从上午挪到下午。",  # a 把 phrase's object is no modifier
    "已经把提醒延后到明早七点。",  # a 把 phrase's object (提醒) is no next step after it
    "我已经把相册的权限改成只有你能看。",  # a target's 能 is no capability
    "已清空联系人列表。",  # a label needs a predicate after it (and 联系人 is no next step: 联系你)
    "体检约在下周一上午。",  # V在 + a time: an arrangement made for that time
    "成了！",  # 成了 alone: a success exclaimed
    "会员续费了一年。",  # a fee paid for a span: its length, no time anchor
    "物业的每月账单提醒删掉了。",  # 每月 after 的 modifies a noun: no habit
    "钢琴课从每周三调到每周五了。",  # 每 as the source and the target of a change
    "楼下那家没货了，我就在网上下单了。",  # 我就 + V了 after a reason: what was done, no offer
    "物业费已经帮你缴了。",  # a party word heading a noun (物业费) is no subject
    "我已经替你向快递公司申请了理赔。",  # a party after a coverb and a modifier is the recipient
    "邮箱现在默认用深色主题。",  # a default now: a setting changed
    "在医院 App 里挂了明早的儿科号。",  # 挂了…号 is a registration, no crash
    "羽毛球场预约到晚上八点。",  # a two-character verb ending in a target verb moves a time (预约到)
    "文档重命名为“合同终稿”。",  # 命名为 + a target
    "已经在下周一的日程里加了提醒。",  # 加了提醒。: the object, no next step (a next step has 我/就/再 or 你)
    "结婚纪念日提醒设在每年 6 月 8 日。",  # V在 + 每年 + a date: the arrangement's time, no habit
    "游泳馆的年卡交了一年的。",  # a duration before 的 is what was bought, not the time since
    "去年的账单我都帮你导出来了。",  # 去年 opens no instruction (去 + a place or a step does)
]

# no claims round 7 read as claims
NOT_CLAIMS = [
    "材料清单我列在下面了。",  # put in this reply (下面, 下方), written nowhere else
    "两个备选方案我放在下方了。",
    "教练在赛前加了两次训练。",  # a party acting on a counted object
]


@pytest.mark.parametrize(("rule", "sentence"), RULE_CASES)
def test_each_round_8_cue_sets_aside_its_own_sentence(guard: ReplyGuard, rule: str, sentence: str) -> None:
    assert_rule_sets_aside(guard, rule, sentence)


@pytest.mark.parametrize("reply", CLAIMS)
def test_the_claims_round_8_reads(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "zh-CN", [])
    assert verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", NOT_CLAIMS)
def test_what_round_8_reads_as_no_claim(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "zh-CN", [])
    assert not verdict.replaced, verdict.explanation
