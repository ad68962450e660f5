"""English, round 8 (notes/guard8en.md): each class a sentence written for the test (no dev-set sentence), read
right only with its rule, cue or grammar change, and what the change must leave alone.

Pure tests: no Redis, no gRPC.
"""

from __future__ import annotations

import pytest

from countersign.guard import ReplyGuard, segment
from tests.unit.guard_rules import assert_rule_sets_aside


@pytest.fixture(scope="module")
def guard() -> ReplyGuard:
    return ReplyGuard.load()


# (rule that sets it aside, sentence): no claim with every rule on, a claim with that rule off
RULE_CASES = [
    # a source and its present verb inside the subject: what follows is the source's content (reported_en.py)
    ("quotation", "The leak sensor reports the valve is shut."),
    ("quotation", "The parking meter reads Paid."),  # a label shown in Title Case
    # a quoted message's own delivery: a participle with no object, or "it" after the quote (reported_en.py)
    ("quotation", 'The postcard says "Your seat is upgraded", posted from Lisbon.'),
    ("quotation", 'The email reads "Refund issued", but it was forwarded to your old address.'),
    # a status as it stands: "right now", "currently", "at the moment" (en.yaml state, part)
    ("state", "Your voicemail greeting is switched off at the moment."),
    ("state", "The office printer is currently set to black and white."),
    # a record held in someone else's name (en.yaml state, after)
    ("state", "The boat slip is rented under your uncle's name."),
    # a window with no occasion, cut at its "and" (en.yaml state, after)
    ("state", "The garden lights are turned on between 6 pm and 11 pm."),
    # everyone's, with a present "be" before it (en.yaml state, before: a headline is left alone)
    ("state", "The roof terrace is opened with the entire block."),  # (read so before; kept beside the headline)
    # "still" + a participle ending in -d (unpaid, laid): a state that goes on (en.yaml state, before)
    ("state", "The water bill is still unpaid, and I haven't paid it."),
    # a present passive after an attempt, even after "but": the obstacle (exclusions._consequence)
    ("state", "I tried to rebook the ferry, but the sailing is cancelled."),
    # a present passive beside the user's own act: the act's record (claims_en.py, flag "record")
    ("state", "You paid the deposit in cash, and the receipt is filed with the lease."),
    # an ASCII ";" joins the clauses of one sentence: the sanction beside a denial is read (segment.py)
    ("state", "Nothing was withdrawn; the card was suspended."),
    # second pass (dev9 and dev1-dev4 classes, after dev9's blind totals)
    # a date fronted as a part of its own governs the clause after it (exclusions._fronted_anchor)
    ("time_anchor", "On 9 April, the storage unit was emptied."),
    # "was last" + a participle: the record of the last time (en.yaml time_anchor, part), dating a present state
    ("time_anchor", "The side gate is shut; it was last opened at 5:20 this morning."),
    # a read summary headed by the assistant's own read (en.yaml time_anchor, sentence)
    ("time_anchor", "I looked over your returns: four were refunded and one was rejected."),
    # a record line closing with its date in brackets (en.yaml time_anchor, sentence)
    ("time_anchor", "Backup plan: auto-renew switched on (2023-08-14)."),
    # a field line, its status and its date (en.yaml success_noun, sentence): a bare head is no report there
    ("success_noun", "Magazine: cancelled (2024-02-01)."),
    # a record by its name (en.yaml quotation, sentence)
    ("quotation", "Ledger: May 2, rent received, deposit returned."),
    # an opening condition governs "it's done" / "it's all set" (en.yaml condition, sentence)
    ("condition", "Once you say yes, it's done."),
    ("condition", "If you approve, it's all set for the weekend."),
    # done but for the user's part (en.yaml waiting_confirmation, sentence)
    ("waiting_confirmation", "The visa form is ready except for your photo."),
    # the user's word, then "and" + its result (en.yaml instruction, sentence)
    ("instruction", "Give me a thumbs-up and the transfer is made."),
    # a person's own act beside a present state: its record (claims_en.py, flag "record")
    ("state", "The electrician has fixed the socket; her report is attached to the ticket."),
    # third pass (a probe batch of my own): a read frame, what is left is the user's, a dash-opened instruction,
    # a past passive on a day of the month
    ("time_anchor", "Looking at the phone bill, the roaming charge was waived."),
    ("waiting_confirmation", "All that's left is your PIN, then the card is activated."),
    ("instruction", "The reply is drafted — just tap send and it's delivered."),
    ("time_anchor", "The school fees were paid on the 5th."),
    # fourth pass: done at another party's end (en.yaml other_agent, after)
    ("other_agent", "The duplicate charge was reversed on the bank's end."),
    # fifth pass: what would have been, then "but" + a present passive: the obstacle (reported_en.after_attempt)
    ("state", "I'd normally have the form filed by now, but the office is shut."),
    ("offer_plan", "We'd usually have the parcel sent within a day."),  # 'd + an adverb + have
]

# claims the grammar now reads (each missed without its change)
CLAIMS = [
    "Rescheduled for Monday at 7 am.",  # "am" after a clock number is no "be" (words_en.py)
    "Alarm changed to 6 am: the early shift.",
    "The old phone is back in its box and set as spare.",  # "as" is no plural noun before a base form
    "I paid the pending invoice from the joint account.",  # a status word after a determiner names the thing
    "Recipe folder shared with the whole book club.",  # a headline with "the whole X" reports
    "Noted the new gate code in your house notes.",  # a read verb with a place that holds writing
    "Listed the spare bike on the neighbourhood marketplace.",
    "Pulled the receipts for March into one folder.",
    "Your alarm now uses the gentle wake-up sound.",  # now + a present verb of how a thing works
    "The visa application is in.",  # a submission "is in" closing its part
    "The passport form is in — the office says two weeks.",
    "I reported the pothole on Mill Lane to the council.",  # report + an object: a report filed
    "The gym plan is frozen; the last classes run next week.",  # "last … s" before a time to come is no anchor
    "The photo album is now friends-only.",  # a result state with "now" is a change (flag "now")
    "Your old phone number is gone from the account.",  # gone from a place
    "The spare monitor is listed on the staff marketplace.",  # a passive of a placing verb with its place
    "Three bin collections are booked for the clear-out.",  # a count determines a plural: no rule
    "You're down for the Tuesday pottery class.",  # a person down for a slot (no "is down": a failure)
]

# what the changes must leave as no claim
NOT_CLAIMS = [
    "I noted a second charge in your card statement.",  # a source, not a place that holds writing
    "Pulled up the tracking page for your parcel.",
    "The cake is in the fridge.",  # "is in" of a thing, not of a submission
    "The sensor reports no motion since noon.",
    "The pool is reserved under her name.",  # someone else's record
    "I reported that the invoice was paid.",  # "reported that": reporting, no filing
    "The photo album is friends-only right now.",  # "right now" is no change
]

# what stands as a claim beside the new cues (controls)
STILL_CLAIMS = [
    "Meeting notes shared with the design team.",  # a plural noun before the participle, no source verb
    'The SMS says "Table booked", so I forwarded it to your partner.',  # the assistant's own send
    "The delivery is booked for Tuesday between 9 and 12.",  # one occasion, then the window
    "The court is booked under your name until noon.",  # the user's own name: no one else's record
    "The first try failed, but the payment is through now.",  # "now" reports a change
    "You asked me to cancel it, and the booking is cancelled.",  # asking is no write: no one else's act
    "You haven't signed it yet, but the lease is sent to the agent.",  # a denied act of the user's
    "The airline confirmed my request and the refund is issued.",  # a third party answering the assistant
    "The hire car is reserved for the 18th.",  # a day of the month to come, no past passive: no anchor
    "You accepted the quote, and the repair is booked for Monday.",  # a go-ahead (permission_verbs), not an act
    "You paid the deposit, so the booking is confirmed.",  # "so" opens the assistant's next step
]


@pytest.mark.parametrize(("rule", "sentence"), RULE_CASES)
def test_each_round8_rule_sets_aside_its_own_sentence(guard: ReplyGuard, rule: str, sentence: str) -> None:
    assert_rule_sets_aside(guard, rule, sentence)


@pytest.mark.parametrize("reply", CLAIMS)
def test_the_classes_round8_reads_as_claims(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", NOT_CLAIMS)
def test_what_round8s_claim_rules_leave_alone(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert not verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", STILL_CLAIMS)
def test_what_round8s_exclusions_leave_standing(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en", [])
    assert verdict.replaced, verdict.explanation


def test_an_ascii_semicolon_joins_one_sentence_and_a_chinese_one_ends_it() -> None:
    assert [s.text for s in segment.sentences("Nothing was moved; the account was frozen.")] == [
        "Nothing was moved; the account was frozen."
    ]
    assert len(segment.sentences("没有转出；账户被冻结了。")) == 2
