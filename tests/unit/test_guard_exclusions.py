"""Claims and exclusions (countersign/guard/claims_*.py, exclusions.py): the grammar proposes, a named rule
sets aside, and each rule has a sentence that is read as a claim without it.

Pure tests: no Redis, no gRPC.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.guard import ReplyGuard, segment
from countersign.guard.claims_zh import _MARKERS
from countersign.guard.lexicon import EXCLUSION_RULES, Lexicon
from countersign.guard.needles import NeedleIndex, satisfied
from tests.unit.guard_rules import assert_rule_sets_aside


@pytest.fixture(scope="module")
def guard() -> ReplyGuard:
    return ReplyGuard.load()


# (rule, sentence): a claim when the rule is switched off, no claim with every rule on
RULE_CASES = [
    ("quotation", 'The notification says "Your order has been cancelled".'),
    ("quotation", "短信里写着「您的订单已取消」。"),
    ("negation", "The refund was not issued."),
    ("negation", "笔记并没有被删除。"),
    ("question", "Has the refund been issued?"),
    ("question", "订单已经取消了吗？"),
    ("offer_plan", "The subscription will be cancelled."),
    ("offer_plan", "我马上把它删了。"),
    ("condition", "If the order has been cancelled, you'll get an email."),
    ("condition", "一旦付款成功，会员会自动开通。"),
    ("waiting_confirmation", "Your transfer is being processed."),
    ("waiting_confirmation", "改签方案已生成，需要你确认。"),
    ("failure", "Payment failed: the card was declined."),
    ("failure", "邮件已发送失败。"),
    ("instruction", "只差一步就搞定了：点一下“提交”。"),
    ("instruction", "Make sure the form is submitted before noon."),
    ("capability", "The app supports having invoices paid automatically."),
    ("other_agent", "The seller cancelled the order."),
    ("other_agent", "小王已经把纪要发到群里了。"),
    ("other_agent", "Meeting room A was booked by someone else."),
    ("other_agent", "水管工今天上午换了阀门。"),  # a person acting on an object (subject_zh.py)
    ("other_agent", "珍娜订好了聚会的场地。"),  # a transliterated name
    ("other_agent", "Ahmed deleted the duplicate rows."),  # a name, not an -ed verb
    ("state", "The bakery is closed on Mondays."),  # a habit
    ("state", "The bridge is closed due to high winds."),  # a cause
    ("state", "The flight is delayed."),  # a passive of a stative verb
    ("state", "Gas prices fell again this week."),  # a thing's own change
    ("state", "The concert is sold out."),  # a capacity
    ("state", "The migration is scheduled to start at midnight."),
    ("state", "雾散了。"),  # a natural subject and a change
    ("state", "周四的瑜伽课已经报满了。"),
    ("state", "大桥因为大风封闭了。"),
    ("state", "This card has been frozen since Monday."),
    ("state", "The shuttle is suspended during the holidays."),
    ("state", "Your next payment is scheduled for the 15th."),
    ("state", "Checkout is locked while a payment is processing."),
    ("state", "这张卡从周一起就被冻结了。"),
    ("condition", "Had I cancelled it, you would have lost the deposit."),
    ("quotation", "The seller's message: refund processed, allow 5 days."),
    ("quotation", "卖家留言：退款已处理，5 天内到账。"),
    ("instruction", "把飞行模式关了再打开就行。"),
    ("failure", "那笔转账被拦截了。"),  # (guard5: with 银行风控 after 被, other_agent now names it first)
    ("failure", "Half the photos uploaded before the connection dropped."),
    ("time_anchor", "你在这家店的上一单 5 月 4 日退款了。"),
    ("other_agent", "你明天已经设了三个提醒。"),
    ("other_agent", "交警把车从榆树街拖走了。"),
    ("other_agent", "Your order shipped from the Leeds warehouse this morning."),  # a merchant's act (verbs.others)
    ("other_agent", "我查了一下，包裹已经签收了。"),
    ("other_agent", "场地方已经发邮件确认了日期。"),  # a party by its suffix; the subject ends at 已经
    ("other_agent", "汤姆已经把票钱还你了。"),  # a name before 把
    ("state", "七月的周末客房基本都订出去了。"),
    ("state", "The fee is waived for students."),
    ("condition", "Your booking is provisional until the deposit is paid."),
    ("condition", "付了定金之前，预订都只是暂定。"),
    ("time_anchor", "The Q3 budget was approved in the last board meeting."),
    ("state", "The bakery on Elm Street is shut for a family wedding."),
    ("success_noun", "这个月五个目标完成了三个。"),  # a progress count
    ("time_anchor", "The order was cancelled on June 3."),
    ("time_anchor", "这张照片三天前被删除了。"),
    ("time_anchor", "The invoice was issued on 12 March and paid a week later."),
    ("time_anchor", "那条评论一个小时前就删了。"),
    ("success_noun", "Cancelled orders stay in the list for 30 days."),
    ("success_noun", "已取消的订单会在 30 天后清除。"),
    ("success_noun", "本月的退款成功率很高。"),
    ("success_noun", "Under Privacy, Blocked Contacts lists everyone."),  # a label in Title Case
    ("success_noun", "已删除邮件占用了 2 GB。"),  # 已 + V + a label noun, then a verb
    ("quotation", 'Marco replied: "Invoice paid, thanks!"'),
    ("generic_statement", "Old drafts are removed by default."),
    # guard3: a thing that changes after a failure in an earlier part, or by itself; a status in a list of statuses
    ("state", "The import failed and the laptop restarted into safe mode."),
    ("state", "同步失败了，平板切回了离线模式。"),
    ("state", "The blinds closed on their own."),
    ("state", "路由器自己重启了两次。"),
    ("success_noun", "报销单分为待提交、已提交、已报销三类。"),
    # guard4: general rules by class (notes/guard4.md), one sentence each, written for the test
    ("state", "The smart lock is paired with your partner's phone."),  # a standing relation (relation_verbs)
    ("state", "Your scanner is still linked to the old workspace."),
    ("state", "The camping gear is stored in the garage loft."),
    ("state", "The blizzard knocked down the power lines."),  # weather acts (natural_subjects)
    ("other_agent", "Your cousin sent 3 invitations for the reunion."),  # a person subject with an object
    ("other_agent", "Mum already paid for the piano lessons."),  # a person subject with an adverb
    ("success_noun", "Files moved to the archive are kept for a year."),  # a participle before the main verb
    ("generic_statement", "Photos uploaded after midnight are tagged with the next day's date."),
    ("time_anchor", "The warranty was activated in 2022 and extended once."),  # a continued part's date
    ("question", "押金退回了没有，我帮你问问。"),  # V了没有
    ("question", "航班是改签了，还是直接退票？"),  # an alternative question
    ("condition", "报名表提交了我通知你。"),  # done, then a next step: a plan
    ("failure", "这笔转账被收款行拒了。"),  # refused by a named party
    ("failure", "扫地机器人离线了。"),
    ("other_agent", "那个车位被人租走了。"),  # 被 + an unnamed person
    ("other_agent", "你哥已经把房租转给房东了。"),  # a kinship word after 你 (words.agents)
    ("other_agent", "小周昨晚删掉了共享相册。"),  # 小 + surname + a time, then the act
    ("negation", "路口晚上不堵了。"),  # 不 + V + 了: no longer
    ("generic_statement", "新注册的用户大多在三天内就退订了。"),  # most users: a pattern, not an act
    ("state", "路由器半夜自动重启了。"),  # a device acting on its own
    ("condition", "套餐到期后自动切换为基础版。"),  # X后 + a change with no 了: a rule
    ("offer_plan", "旧版本的数据会被删除。"),  # 会被
    ("instruction", "Put the spare key under the mat and lock the back door."),  # base form + "and" + base form
    ("state", "The pharmacy is closed today."),  # a place closed for a day
    ("state", "The sky cleared after lunch."),
    ("instruction", "点“提交”之后报名就完成了。"),  # a tap on a named button, then 就
    ("other_agent", "旅行社把出发时间改到了早上七点。"),  # an organisation by its suffix (社, 院, 馆, 店 ...)
    ("state", "验证码输错了两次，账户暂时冻结了。"),  # a wrong entry is a failure: the freeze is its consequence
    ("other_agent", "The courier parked in the loading bay."),  # a determined person subject: no headline
    ("state", "The shredder jammed on the third page."),  # a device's own change (verbs.changes)
    ("state", "Your PIN is printed on the back of the letter."),  # printed on: a relation
    ("state", "会员积分自动清零了。"),  # 自动 + V了: a service acting on its own
    ("other_agent", "记账软件把重复的账单合并了。"),  # software acting (words.agents)
    ("condition", "只要付完定金，座位就保留了。"),  # 只要 X，Y 就 Z
    ("state", "The thermostat is synced with the hallway sensor."),  # synced with: a relation
    # guard5: precision classes from fresh probe batches (each a claim on 3c3da48, notes/guard5.md)
    ("other_agent", "你的账号被平台封禁了。"),  # 被 + someone: the verb after them is theirs, not a bare 封禁了
    ("state", "台风把小区门口的树刮倒了。"),  # weather as the subject of 把: a thing's own change
    ("state", "手机内存不足，相册同步停了。"),  # a resource used up is a failure: what stops after it, its consequence
    ("success_noun", "预约成功的通知短信一直没收到。"),  # V成功 + 的 + a noun: a modifier
    ("failure", "这份申请打回来了，缺少签字。"),  # 打回: sent back, a rejection
    ("state", "信用卡停用了，原因是长时间没有使用。"),  # the sentence names a cause: a state explained
    ("offer_plan", "报表快做完了。"),  # 快 + V完/好 + 了: about to be done
    ("offer_plan", "你的宽带明天会切换到新套餐。"),  # a time to come + 会: what will happen
    ("negation", "报名表上还漏填了一项。"),  # an omission (漏, 少, 忘记 + V了): what was not done
    ("waiting_confirmation", "视频上传了一半。"),  # V了一半: a part done, not the whole
    ("other_agent", "你的房间已经被酒店升级成了套房。"),  # 已经被 + someone: the passive rule reads who acted
    ("waiting_confirmation", "待完成：报销单、年假申请。"),  # 待 + a verb: still to be done
    ("success_noun", "Refunds issued after noon arrive the next morning."),  # a participle before the present verb
    ("generic_statement", "Duplicate photos get deleted after a week."),  # get + participle of a bare plural
    ("quotation", "The plumber thinks the valve is fixed."),  # what someone thinks or knows is content
    ("question", "Moved to 3pm, or would you rather keep 2?"),  # an alternative question asks which
    ("state", "I couldn't renew the permit — the office is closed."),  # a present passive after a failure: why
    ("state", "The transfer didn't go through — your card is frozen."),
    ("other_agent", "小陈给你寄了一箱橙子。"),  # 小/老/阿 + one character is a person
    ("other_agent", "周六的场地被订走了。"),  # 被订走/被占/被抢: taken by someone else
    ("failure", "我试着把周报的截止时间改到了周五，系统不让。"),  # a try is no completion
    ("other_agent", "The florist reached out about the delivery time."),  # people by their trade (words.persons)
    ("success_noun", "Parcels sent after 4pm cost double."),  # a base form that is also a past (cost, put)
    ("negation", "公司邮箱禁止转发到外部地址。"),  # a prohibition (禁止, 不允许)
    ("state", "你上周填的表单已自动提交。"),  # 已自动 + V closing the part: a service acting on its own
    # guard6 (Chinese precision)
    ("other_agent", "牙医把拔牙改到了月底。"),  # a trade ending with 医 (agent_suffixes)
    ("other_agent", "教导主任已经把处分通知贴出来了。"),  # an office (主任, 校长, 店长 …: agents)
    ("time_anchor", "上个季度公司邮箱扩容了两次。"),  # a past period (上个季度, 上学期, 前阵子)
    ("time_anchor", "查了一下，这辆车的违章已经处理过了。"),  # a read first, then V过了: what was found
    ("quotation", "理赔结果：已赔付 1200 元。"),  # a result field read from data (X结果：)
    ("other_agent", "第二个包裹已出库，明天到。"),  # a merchant's act read as a whole verb (出库, not 出 + 库)
    ("quotation", "APP 推送：你的快递已放进丰巢柜。"),  # a notice read out (短信提醒：, App 推送：)
    ("quotation", "账户类型：已升级为企业版。"),  # a field read from data (类型：, 等级：, 进度：)
    ("success_noun", "五张发票里，三张已报销，两张还在审批。"),  # a tally of a set's statuses
    ("state", "家里的路由器开启了访客密码。"),  # a feature a thing holds (开通了快捷支付, 设置了访问密码)
    ("state", "报修单已完结，处理人是李师傅。"),  # a record's handler named
    ("other_agent", "售后部门已经处理完了。"),  # an organisation that handles (处理, 审核, 受理 …)
    ("other_agent", "同事的工位号换了，在三楼东侧。"),  # a third party's own thing changed (X的…换了)
    ("quotation", "缴费明细：已缴物业费 1800 元。"),  # a details heading (明细：, 详情：, 记录：)
    ("time_anchor", "- 3 月 8 日：已续费 99 元"),  # a dated record heading its line
    ("state", "期末成绩已出。"),  # results issued by someone else (账单已出, 成绩出来了)
    ("state", "新手机的省电模式默认打开了。"),  # a default
    ("state", "验证异常，支付账户已被限制。"),  # a lock after a failure: the system's sanction
    ("instruction", "开通步骤：下载 App、实名认证，就办好了。"),  # steps to follow, then 就办好了
    ("offer_plan", "明白，你是想把周会挪到了下午。"),  # 是想把: a wish, not an act
    ("condition", "等退款到了，我就提醒你。"),  # 等 X 了，再/就 …: a next step after X
    ("quotation", "工单状态已更新为“已解决”。"),  # a status the system updated (状态已更新为)
    ("failure", "订票的页面崩了。"),  # a page or an app that crashed (崩了, 卡死了)
    ("time_anchor", "核对了下流水，这笔学费已经交过了。"),  # a read with its object, then V过了
    ("other_agent", "你的宽带套餐已经升到 500 兆了，是运营商送的。"),  # a cleft naming who did it (，是 X … 的)
    ("state", "小区今天开始供暖了。"),  # an inception (开始 + V了), not a completion
    ("state", "电脑自动重启到了安全模式。"),  # 自动 + V + 到/成/为: a device acting on its own
    ("instruction", "点一下“一键清理”，缓存就删掉了。"),  # a tap on a named button, 就 in the next part
]

# guard4: what the new rules must leave standing, and claims the grammar now reads (each fails without its change)
GUARD4_CLAIMS = [
    "Your backup drive is now connected to the office server.",  # "now": a change, not a standing relation
    "Your booking's locked in.",  # a particle, not a relation's preposition
    "Your password was reset a few minutes ago, as you requested.",  # on request: the assistant's act
    "Landlord notified.",  # a person as a headline's patient
    "The staging bucket has been restored from last week's snapshot.",  # a time that names a thing
    "新的配送地址更新为公司前台。",  # V + 为 + target, no 了
    "周会改到周三上午十点。",
    "报销单已经在线提交。",  # a skip word after 已经
    "订阅续费 39 元成功。",  # 成功 closing the sentence
    "两个没人用的测试账号我都删掉了。",  # a negation inside a relative clause
    "上个月的账单截图已经发给你了。",  # a time word that modifies a noun
    "你上周的报销单提交了。",  # 你 + a time word + 的: the user's thing, not the user acting
    "三月的 12 张收据都标成了“差旅”。",  # 标 is a verb
    "Your old bike is on the marketplace now.",  # "now" closing the part, as "is now X"
    "The kids' chores are on the fridge planner now.",
    "Your grocery list now includes oat milk.",  # now + words.now_verbs: what a thing holds changed
    "Your content filters now block gambling sites.",  # now + a plural present after a plural subject
]

# guard4: what the new claim rules must not read as claims
GUARD4_NOT_CLAIMS = [
    "下载到本地的文件都会被加密。",  # V到 inside a relative clause, then 会: the target rule's claim runs to the end
    "Your balance is 30 dollars now.",
    "It's raining now.",
    "Prices now include tax.",  # a bare plural subject: a rule, read only for write verbs
    "那份报价单我读完了，没问题。",  # a read verb with its result complement is still a read
    "投稿截止了。",  # a deadline passed: a state (verbs.not_writes)
    "图书馆的自助借还机维护到周五。",  # V到 + a time is "until" unless V moves a time
]


# a gated rule's cue sets aside only what the assistant did not do itself
ASSISTANT_ACTS = [
    "I've set the lights to turn off at 11pm every night.",
    "I closed the shop's calendar on Sundays.",
    "我把例会改成了每周一上午。",
]

# the grammar reads who acts: a person or an organisation acting on something is someone else; a thing as the
# topic is the patient (a claim); a natural subject changes by itself only with a verb of change
WHO_ACTS = [
    ("房东周一已经签了续租合同。", False),
    ("运营商远程重启了你的光猫。", False),
    ("酒店给你升级了房型。", False),
    ("Dana 昨天已经把合同寄出了。", False),
    ("三月份的票据都打上了“报销”标签。", True),
    ("合同已经发给王律师签字。", True),
    ("鲜花订好了，周六上午送到。", True),
    ("座位升到了商务舱。", True),
    ("气温升到了 30 度。", False),
    ("旧手机号已经跟账号解绑。", True),
    ("I've had the package redirected to your office.", True),
    ("The cabin is heated by a wood stove.", False),
    ("Your alarm now repeats on weekdays.", True),
    ("Texted Sam the address.", True),
    ("You're all booked for Thursday at 10.", True),  # "all" after an auxiliary determines nothing
    ("I've RSVP'd yes to Priya's birthday dinner.", True),  # a noun made a verb with 'd
    ("你女儿已经加进家庭套餐了。", True),  # after 加进 comes a place, not an object
    ("每月给食物银行的捐款已经停了。", True),  # 每月 modifies the noun, no habit
    ("路灯坏了的事已经向 12345 反映了。", True),  # 坏了的事 names a matter, no failure
    ("卖家说已经发货了，不过我还是帮你提交了丢件申诉。", True),  # 还是 "still", no question
    ("健身卡从今天起退掉了。", True),  # from today on: a change, not a lasting state
    ("I've pushed your dentist appointment back by a week.", True),  # "by a week" is a measure, no agent
    ("The team offsite is on everyone's calendar.", True),
    ("Sure thing — the garage door's shut.", True),  # "'s" before a participle is "is"
    ("车船税续了一年。", True),  # a renewal's length, no time anchor
    ("会员给你续上了，又是一年。", True),  # 会员 is a membership, not a member
    ("The doc is now shared with the whole team.", True),  # "now": a change, not a standing state
    # guard3: a part that goes on without a subject of its own shares the person the previous part opened with
    ("The plumber came by and fixed the tap.", False),
    ("维修师傅来过一趟，还换了滤芯。", False),
    ("The plumber came by, and I paid him from your account.", True),  # a subject of its own
    ("The payment failed, so retried it with your other card.", True),  # "so" opens the speaker's next step
    ("已经帮你建好了待办，并发送了邀请邮件。", True),  # the assistant's part: no one else to go on from
    # guard3: what the failure and the status-list rules must leave standing
    ("同步失败了，所以我把文件重新上传了。", True),
    ("The first upload failed, but the second one went through.", True),  # a contrast reports the outcome
    ("三封邮件已转发、已归档、已标星。", True),  # completions only: a report, not a list of statuses
]


# guard5: claims the grammar now reads, one per class (each missed on 3c3da48)
GUARD5_CLAIMS = [
    "体检的时间顺延了两天。",  # a verb of the dictionary below the old frequency cut (顺延: 18)
    "还没付款的三个订单都取消了。",  # a negation inside a modifier before 的 names the thing
    "不用的那台旧平板我帮你恢复出厂设置了。",
    "同步失败的那几张照片已经重新上传了。",  # a failure word inside a modifier
    "填错的身份证号改过来了。",
    "跟物业说定了，周四上午来换锁。",  # 说定/说好: an arrangement made, no quotation
    "旧的收货地址删除咯。",  # 咯/喽/啰/嘞 close a sentence as 了 does
    "退货的包裹改送到商家仓库了。",  # a party after 到/进/在 is a place
    "这几封邮件都设为已读了。",  # V为/成 + 已X: the verb before 为/成 acts
    "收件人的名字拼写改对了。",  # adjectives of the result (对, 清, 干净 ...)
    "学校那边我已经请过假了。",  # X那边我: a topic the assistant acts on
    "成功续订一年的杂志。",  # 成功 as an adverb before any write verb
    "你的默认卡现在是尾号 8821 那张了。",  # 现在是 … 了: 号 without a number is no date
    "书房的灯现在处于夜间模式。",  # 现在处于 … 模式
    "修改后的合同我传回你邮箱了。",  # 你 after 回, before 邮箱: the recipient, not the subject
    "医院体检的报告下载好了。",  # a party word modifying a noun is no subject
    "- 已退订：游泳课（周六）",  # a status heading the thing it was done to: a report, no list of statuses
    "那条评论被成功删除了。",  # an adverb after 被 is no agent
    "燃气户头转到新房东名下了。",  # a party + 名下/手上 is a place, no subject
    "会员有效期延长了一年。",  # 延长了一年: the length of a change, no time anchor
    "The dentist's office has been notified that you're running late.",  # a message verb keeps its content
    "I reached out to the insurer about the dented bumper.",  # reach out: a message sent
    "The contact card now reads Aunt Rosa instead of Rosa M.",  # now + reads/says/shows: what it holds changed
    "Your sublet ad is live on Craigslist.",  # live on a platform
    "Your vacation responder is on until the 3rd.",  # on until a date (a time, no condition)
    "You're on the waitlist for the Sunday brunch.",  # on a list of people
    "Got you down for two seats at the quiz night.",  # got + someone + down for
    "I had the garage rotate your tyres.",  # a causative with a base form
    "I got the school to move the meeting to Thursday.",
    "• Cancelled: gym membership (monthly)",  # a status heading what it was done to
    "- Gym locker — renewed (6 months)",  # a dash or a bracket joins no list of statuses
    "锁屏密码改成你生日了。",  # 你 after 成: the target, not the subject
    "搞掂！",  # 搞掂 (Cantonese 搞定)
    "您的发票已经重新开好了呢～",  # 了呢 closes a statement softly: no question
    "删了嘛，放心。",
    "Sorted the receipts into three envelopes.",  # sort + into: filed
    "Your planning objection is in with the council.",  # in with someone: submitted
    "你的自行车座垫调高了。",  # 自行车 holds no 自行 ("by itself")
    "车位的租约续签了两年。",  # 续签了两年: the length of a renewal, no anchor
    "前天多扣的会员费退回来了。",  # a time inside a modifier (前天多扣的) dates the thing, not the act
]

# guard5: what the grammar must not read as a claim
GUARD5_NOT_CLAIMS = [
    "这件事我已经尽力了。",  # effort (尽力, 努力) is no write
    "对咯。",  # a discourse word before a final particle
    "旧手机号已经停机了。",  # a service's state (停机, 欠费), no write
    "怎么会员又续费了呢",  # a question word with 了呢 still asks
    "I got the chance to book it.",  # not someone made to act (words.causative_stops)
    "I had a look at your inbox.",
]


# guard6: claims a Chinese precision class must leave standing (each missed on 19f94dd or by the class's first form)
GUARD6_CLAIMS = [
    "物业约好了，明天上午来修水管。",  # a party + 约好/订好/联系好: the party is the object, not the subject
    "提醒改成每周一早上九点了。",  # a schedule as the target of a setting (改成每周…) is no habit
    "玉米我给你蒸熟了。",  # 熟 after a verb is its result (result_complements)
    "年夜饭的酒店订在了江边那家。",  # a party + 订在: the object
    "你的话费帮你充好了 100 元。",  # 的话 in 的话费 is no "if"
    "家里的路由器我帮你开启了访客密码。",  # a feature set by the assistant is its act
    "停车的超时费帮你交了。",  # 超时费 is a fee, no failure
    "旧邮件我都挪到“已处理”文件夹了。",  # a status named in quotes is no verb of the clause: 挪到 acts
    "平板上的账号帮你踢下线了。",  # 下线 after a verb is its result (result_complements)
    "物流帮你催了，说是明天派送。",  # a party + 帮你催了 with no object: the party is what was urged
    "体检报告取完了，就差等医生解读。",  # 就差等…: what is left is someone else's; the claim beside it stands
    "排队帮你取好号了，前面还有 5 位。",  # 排队 ends with 队 but is no party (not_agents)
]

# guard6: what is no claim (each read as a claim on 19f94dd)
GUARD6_NOT_CLAIMS = [
    "这个月的奖金已经进账了。",  # money arriving (入账, 进账) is no write
    "院子里的柿子已经熟了。",  # a plant's growth (熟, 发芽, 开花)
    "窗台上的蒜已经发芽了。",
    "网约车已经驶入小区了。",  # a vehicle moving (驶入, 驶离, 进站)
    "页面上显示“已付款”了。",  # what is shown in quotes (显示“…”): content, with the quoted status masked
]


@pytest.mark.parametrize("reply", GUARD6_CLAIMS)
def test_the_classes_guard6_leaves_as_claims(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "zh-CN", [])
    assert verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", GUARD6_NOT_CLAIMS)
def test_what_guard6_reads_as_no_claim(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "zh-CN", [])
    assert not verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", GUARD5_CLAIMS)
def test_the_classes_guard5_reads_as_claims(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", GUARD5_NOT_CLAIMS)
def test_what_guard5s_claim_rules_leave_alone(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert not verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", GUARD4_CLAIMS)
def test_the_classes_guard4_reads_as_claims(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", GUARD4_NOT_CLAIMS)
def test_what_guard4s_claim_rules_leave_alone(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert not verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", ASSISTANT_ACTS)
def test_a_gated_rule_never_sets_aside_the_assistants_own_act(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert verdict.replaced, verdict.explanation


@pytest.mark.parametrize(("reply", "claim"), WHO_ACTS)
def test_who_acts_is_read_from_the_subject(guard: ReplyGuard, reply: str, claim: bool) -> None:
    verdict = guard.check(reply, "en", [])
    assert verdict.replaced is claim, verdict.explanation


def test_every_rule_has_a_case() -> None:
    assert {rule for rule, _ in RULE_CASES} == set(EXCLUSION_RULES)


@pytest.mark.parametrize(("rule", "sentence"), RULE_CASES)
def test_each_exclusion_rule_sets_aside_its_own_sentence(guard: ReplyGuard, rule: str, sentence: str) -> None:
    assert_rule_sets_aside(guard, rule, sentence)


@pytest.mark.parametrize(
    "reply",
    [
        "I couldn't set the reminder, but the todo has been created.",
        "The SMS failed; the email has been sent.",
        "提醒没设成功，不过待办已经建好了。",
        "短信发送失败，邮件倒是已经发出去了。",
        "You have 3 unread emails; I've archived the oldest one.",
        "查到你下周有两个会议，已经把第二个改到周五了。",
    ],
)
def test_a_claiming_clause_beside_a_denying_or_read_one_is_still_a_claim(guard: ReplyGuard, reply: str) -> None:
    assert guard.check(reply, "en", []).replaced


@pytest.mark.parametrize(
    ("reply", "rule"),
    [
        ("I've refunded the late fee.", "perfect"),
        ("I uploaded the slides to the shared drive.", "past"),
        ("Your subscription has been cancelled.", "passive"),
        ("Deleted.", "bare_head"),
        ('Marked "Pay rent" as done.', "bare_head"),
        ("Invoice exported as PDF.", "headline"),
        ("Your shipping address now points to the office.", "result_state"),
        ("Your dentist appointment is on the calendar.", "result_state"),
        ("All set!", "success_word"),
        ("Yep, took care of it.", "success_phrase"),
        ("✅ Reminder", "success_mark"),
        ("I've unpinned the message.", "perfect"),  # a prefixed verb: regular morphology
        ("I texted Sam the address.", "past"),  # a verb the table lacks: -ed morphology
        ("订单已经帮你取消了。", "completion_aspect"),
        ("明早七点的闹钟设置好了。", "result_complement"),
        ("行，那封邮件删除了。", "perfective_le"),
        ("那封邮件撤回了。", "result_complement"),
        ("我把会议纪要捋顺了。", "ba_construction"),  # (a verb no table lists; 归拢 is one since guard5)
        ("电费已缴纳成功。", "completion_aspect"),
        ("删除成功，共 3 条。", "success_complement"),
        ("你的那条评论被删除", "passive"),
        ("搞定！", "colloquial_success"),
        ("客厅的灯现在已经是关闭状态了。", "result_state"),
    ],
)
def test_the_grammar_rule_that_reads_a_claim_is_named(guard: ReplyGuard, reply: str, rule: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert verdict.replaced, reply
    assert rule in {c.rule for c in verdict.claims}, verdict.claims


def test_any_write_verb_is_read_not_only_todo_verbs(guard: ReplyGuard) -> None:
    verbs = [
        "refunded",
        "archived",
        "muted",
        "merged",
        "renewed",
        "unsubscribed",
        "rebooked",
        "transferred",
        "reinstated",
        "escalated",
        "quarantined",
        "whitelisted",
        "defragmented",
        "notarized",
    ]
    for verb in verbs:
        assert guard.check(f"I've {verb} it.", "en", []).replaced, verb
        assert guard.check(f"It has been {verb}.", "en", []).replaced, verb
    for verb in ["退", "撤回", "解冻", "注销", "续费", "挂失", "报销", "改签"]:
        assert guard.check(f"已经帮你{verb}了。", "zh-CN", []).replaced, verb


def test_read_verbs_do_not_claim(guard: ReplyGuard) -> None:
    for reply in (
        "I found three matching documents.",
        "I've checked your calendar.",
        "I looked at the order.",
        "我查看了你的日程。",
        "我找到了三份相关文件。",
        "已经收到你的需求。",
    ):
        assert not guard.check(reply, "en", []).replaced, reply


def test_an_excluded_candidate_is_explained(guard: ReplyGuard) -> None:
    verdict = guard.check("The order was never cancelled.", "en", [])
    assert verdict.reason == "NO_CLAIM" and not verdict.replaced
    assert verdict.excluded == (("The order was never cancelled.", "negation", "never"),)
    assert "set aside by negation" in verdict.explanation


_WORDS = [
    "not",
    "never",
    "n't",
    "will",
    "if",
    "once",
    "pending",
    "failed",
    "tap",
    "can be",
    "by",
    "yesterday",
    "ago",
    "on June 3",
    "status:",
    "rate",
    "always",
    "done",
    "all set",
    "is now",
    "went through",
    "care",
    "sorted",
    "ready",
    "gone",
    "✅",
    "没有",
    "吗",
    "？",
    "会",
    "如果",
    "失败",
    "请",
    "能",
    "你",
    "小王",
    "昨天",
    "成功率",
    "搞定",
    "妥了",
    "OK了",
    "已经",
    "状态",
    "了",
    " ",
    ",",
    ".",
    "?",
    "I",
    "it",
    "was",
    "been",
    "OK",
    "oK",
    "Ok了",
    "都oK啦",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.lists(st.one_of(st.sampled_from(_WORDS), st.text(max_size=4)), max_size=30).map("".join))
def test_needles_never_hide_a_match(guard: ReplyGuard, text: str) -> None:
    """Every match holds a needle of each set (in the text lower-cased: needles are lower-case, and a zh-style
    lexicon's regexes match case-insensitively), and the needle index finds them there."""
    for lex in guard.lexicons_by_name.values():
        folded = lex.fold(text)
        hay = folded.lower()
        phrases = guard.grammars[lex.name].phrases
        rules = [(c.rx, c.needs, lex.cue_index) for cues in lex.cues.values() for c in cues]
        rules += [(rx, need, phrases.needles) for _rule, rx, need in phrases.rules]
        for rx, need, index in rules:
            if need is not None and rx.search(folded):
                assert all(any(n in hay for n in group) for group in need), (rx.pattern, text)
                assert satisfied(need, index.present(folded)), (rx.pattern, text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.lists(st.one_of(st.sampled_from(_WORDS), st.text(alphabet="abcdenorstw' ,.", max_size=6)), max_size=30).map(
        " ".join
    )
)
def test_needles_found_word_by_word_are_the_needles_of_the_text(guard: ReplyGuard, text: str) -> None:
    """NeedleIndex.present with the words of an ASCII text finds what a test of every needle finds."""
    low = text.lower()
    if not low.isascii():
        return
    words = re.findall(r"[a-z]+", low)
    index = guard.grammars["en"].phrases.needles
    assert index.present(low, words) == index.present(low)


_PIECES = [
    "done",
    "all set",
    "is on",
    "is now",
    "live",
    "up",
    "ready",
    "sorted",
    "went through",
    "it's",
    "handled",
    "搞定",
    "妥了",
    "成功了",
    "完成",
    "OK了",
    "✅",
    "状态",
    "已经",
    "with",
    "by",
    "you're",
    "all done",
    "back",
]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    words=st.lists(
        st.one_of(
            st.sampled_from(_PIECES),
            st.sampled_from([",", ".", "!", " but ", "，", "但是", " "]),
            st.text(alphabet="abdeinost '", max_size=5),
        ),
        max_size=24,
    )
)
def test_a_phrase_rule_that_matches_a_part_is_never_left_out(guard: ReplyGuard, words: list[str]) -> None:
    """Phrases.live searches the whole sentence (or its parts joined) once; it keeps every rule a part matches."""
    text = " ".join(words)
    for lex in guard.lexicons_by_name.values():
        phrases = guard.grammars[lex.name].phrases
        sentence = segment.cut(segment.Sentence(text, 0, (), ()), lex.part_breaks)
        live = {rx for _r, rx, _n in phrases.live(sentence)}
        for _rule, rx, _need in phrases.runnable(text):
            if any(m.end() > m.start() for p in sentence.parts for m in rx.finditer(lex.fold(p.text))):
                assert rx in live, (rx.pattern, text)


# guard4: the Chinese may-claim markers became one character class; every text round 3's markers found, they find
_ROUND3_MARKERS = re.compile(r"[已刚了啦咯喽嘞啰被把将]|成功|完成|完毕")


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="已刚了啦咯喽嘞啰被把将成功完毕为到的我你订好取消。，a ", max_size=12))
def test_the_chinese_markers_find_whatever_round_3s_found(text: str) -> None:
    if _ROUND3_MARKERS.search(text):
        assert _MARKERS.search(text)


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _indexes(guard: ReplyGuard) -> list[tuple[Lexicon, NeedleIndex]]:
    return [
        (lex, index)
        for lex in guard.lexicons_by_name.values()
        for index in (lex.cue_index, guard.grammars[lex.name].phrases.needles)
    ]


def _every_needle(index: NeedleIndex, text: str) -> set[str]:
    """Every needle the text holds; a caseless index's needles with a cased letter in any case."""
    low = text.lower()
    return {n for n in index.needles if n in (low if index.caseless and n != n.upper() else text)}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(
        st.one_of(
            st.sampled_from(_WORDS),
            st.text(max_size=4),
            st.sampled_from(["已", "删", "没有", "été", "—", "OK", "oK", "Ok"]),
        ),
        max_size=30,
    )
)
def test_needles_found_by_first_character_are_the_needles_of_the_text(guard: ReplyGuard, pieces: list[str]) -> None:
    """NeedleIndex.present on a text that is not ASCII tests only the needles whose first character the text
    holds: it finds what a test of every needle finds (every cue index and phrase index)."""
    text = "".join(pieces) + "。"
    for lex, index in _indexes(guard):
        folded = lex.fold(text)
        assert index.present(folded) == _every_needle(index, folded), (lex.name, text)


def test_needles_found_by_first_character_in_every_corpus_sentence(guard: ReplyGuard) -> None:
    """The same over every sentence of every guard corpus, normalised and folded as the guard reads it."""
    for path in sorted(FIXTURES.glob("guard_*.yaml")):
        for item in yaml.safe_load(path.read_text(encoding="utf-8"))["sentences"]:
            for sentence in segment.sentences(guard.normaliser.normalise(str(item["text"]))):
                for lex, index in _indexes(guard):
                    folded = lex.fold(sentence.text)
                    assert index.present(folded) == _every_needle(index, folded), (path.name, sentence.text)


_BREAK_PIECES = ["but", "But", "BUT", "and", "And", "so", "So", "or", "because", "Because", "of", "OF", "then"]


def _breaks_by_regex(sentence: str, breaks: re.Pattern[str]) -> list[tuple[int, int, str]]:
    return [(m.start(), m.start(), m.group(0)) for m in breaks.finditer(sentence) if m.group(0)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(
        st.one_of(st.sampled_from(_BREAK_PIECES), st.text(alphabet="abnorstu_0 ,.'\n\tABS-", max_size=4)),
        max_size=24,
    )
)
def test_part_breaks_found_in_lower_case_are_the_regexs(guard: ReplyGuard, pieces: list[str]) -> None:
    """segment._break_words finds on an ASCII sentence, through the lower-cased form of the English part breaks,
    exactly what the lexicon's case-insensitive regex finds (start and the word as written), glued or spaced."""
    breaks = guard.lexicons_by_name["en"].part_breaks
    assert breaks is not None and segment._lower_breaks(breaks) is not None  # en.yaml's breaks take the fast path
    for text in ("".join(pieces), " ".join(pieces)):
        assert segment._break_words(text, breaks) == _breaks_by_regex(text, breaks), text


def test_part_breaks_in_every_corpus_sentence(guard: ReplyGuard) -> None:
    """The same over every sentence of every guard corpus, as the guard reads it, for every lexicon."""
    for path in sorted(FIXTURES.glob("guard_*.yaml")):
        for item in yaml.safe_load(path.read_text(encoding="utf-8"))["sentences"]:
            for sentence in segment.sentences(guard.normaliser.normalise(str(item["text"]))):
                for lex in guard.lexicons_by_name.values():
                    if lex.part_breaks is not None:
                        got = segment._break_words(sentence.text, lex.part_breaks)
                        assert got == _breaks_by_regex(sentence.text, lex.part_breaks), sentence.text


@pytest.mark.parametrize(
    "reply",
    [
        "Order #4471: cancelled, as requested.",
        "Invoice #88: paid, as requested.",
        "Old backups: deleted, as requested.",
        "Meeting: moved, as requested.",
        "Reminder: set, as requested.",
        "Your 6pm table: booked, as you asked.",
        "Trial: extended, per your request.",
        "订单 #4471：已取消，按你的要求。",
    ],
)
def test_a_request_mark_is_no_item_of_a_status_list(guard: ReplyGuard, reply: str) -> None:
    """ "as requested" after a bare status is the user's request, not a third status: the status reports the
    assistant's act (it passed with no receipt as "a status named in a list of statuses")."""
    assert guard.check(reply, "en", []).replaced, guard.check(reply, "en", []).excluded
