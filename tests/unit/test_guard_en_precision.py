"""English and obfuscated precision, round 6 (notes/guard6en.md): each class a sentence written for the test
(not a probe sentence), read right only with its rule or cue, and what the change must leave alone.

Pure tests: no Redis, no gRPC.
"""

from __future__ import annotations

import pytest

from countersign.guard import ReplyGuard
from tests.unit.guard_rules import assert_rule_sets_aside


@pytest.fixture(scope="module")
def guard() -> ReplyGuard:
    return ReplyGuard.load()


# (rule that sets it aside, sentence): no claim with every rule on, a claim with that rule off
RULE_CASES = [
    # a status with its date and nothing else is a record read back (en.yaml success_noun, after)
    ("success_noun", "Water bill (settled Oct 2), internet bill (due Oct 20)."),
    # the user's act, then "and" + its result: the result waits on the user (en.yaml instruction, sentence)
    ("instruction", "Simply scan the QR code and your ticket is validated."),
    ("instruction", "Two taps in the app and your card is frozen."),
    # ... or its time (en.yaml success_noun, after)
    ("success_noun", "Nightly backup: finished 02:15, no errors."),
    # "has been since": the state has lasted (en.yaml state, sentence)
    ("state", "The domain is renewed, and has been since 2019."),
    # an opening condition governs its main clause's present passive (en.yaml condition, sentence)
    ("condition", "Once the bank signs off, the loan is released and the funds are wired."),
    # the next step of an instruction: "and" + a base form after a part that opens with a base form (exclusions.py)
    ("instruction", "To have the parcel redirected, open the app and set a new address."),
    # what a screen shows after a display noun and a colon (en.yaml quotation, sentence)
    ("quotation", "The kiosk flashes an alert: 'Payment accepted'."),
    # a property by a count or a colour (en.yaml state, after)
    ("state", "The signage is translated into six languages."),
    ("state", "The front door is painted dark green."),
    # stopped halfway is a failure; what changes after it is its consequence (en.yaml failure, part)
    ("state", "The download broke off midway and the laptop shut down."),
    # a mark in a key or legend names a symbol, reports nothing (en.yaml success_noun, before and after)
    ("success_noun", "In this list, ✔ means the form was signed."),
    ("success_noun", "Key: ✅ = renewed, ❌ = lapsed."),
    # a log read back (en.yaml quotation, sentence)
    ("quotation", "Security log: 'Recovery email changed' from a laptop in Leeds."),
    # someone else's message: "X wrote/texted/emailed that …" (en.yaml quotation, before)
    ("quotation", "The school emailed that the trip fees have been refunded."),
    # a read summary headed by its source (en.yaml time_anchor, sentence)
    ("time_anchor", "From the tracking page: the parcel was redelivered to the depot."),
    # a season named with "this" frames a state as "the" does (en.yaml state, after)
    ("state", "The outdoor pool is closed for this season."),
    # the user's act, then "then" + its result (en.yaml instruction, sentence)
    ("instruction", "Press the reset pin for ten seconds, then the router is wiped."),
    # "When you …," opens a condition as "If you …," does (en.yaml condition, sentence)
    ("condition", "When you land, the airport transfer is booked through the hotel."),
    # a summary named as what is read (en.yaml time_anchor, sentence)
    ("time_anchor", "Weekly recap of your deliveries: 3 received, 1 refunded."),
    # a checklist read back (en.yaml success_noun, sentence)
    ("success_noun", "Moving checklist — done: boxes, van hire."),
    ("success_noun", "Finished: flights and hotel, missing: car hire."),
    # "still" + a participle: a state that goes on (en.yaml state, before)
    ("state", "Your old number is still forwarded to the new phone."),
    # a trailing attribution; what a thing reads after a colon (en.yaml quotation, sentence)
    ("quotation", "The boiler has been fixed, the landlord told me."),
    ("quotation", "The screen reads: 'Card accepted'."),
    # someone's message in single quotes after "texted:" (en.yaml quotation, sentence)
    ("quotation", "Priya messaged: 'Invoice paid, thanks!'"),
    # fully charged is a capacity, as fully booked (en.yaml state, before)
    ("state", "Your e-bike is fully charged."),
    # a record's fields with a day-month date; a tally in brackets (en.yaml success_noun)
    ("success_noun", "Invoice 2231 · Paid · 3 Mar"),
    ("success_noun", "Forms this week: 6 (2 signed)."),
]

# sentences with no claim the grammar used to read as one
NOT_CLAIMS = [
    # "not yet" is one negation, not a part break before "yet" (en.yaml part_breaks)
    "The rebate form reached the office, not yet stamped.",
    # "rent" is a noun, not a past of "rend" (en.yaml verbs.not_writes)
    "Rent (November) is the largest line of the budget.",
    # a sentence cut by one empty line reads on: the negation governs the verb after the gap (normalise.py, lines)
    "I haven't\n\nrenewed the permit online.",
    "Nothing\n\nwas deleted from the shared drive.",
]

# claims the grammar used to miss
CLAIMS = [
    # a plural possessive ("the girls' phone") is no subject of a later verb: the head participle reports
    "Switched on location sharing on the girls' phone.",
    # a setting the assistant made, until a time, is no "closed until" frame (en.yaml state, sentence)
    "The newspaper delivery is paused until the 10th.",
    # a head participle that takes a determiner's noun is a verb with its object, no modifier (placement_en.py)
    "Renewed the bus pass with your debit card.",
    # a plural noun after a preposition is no subject of the verb after it (placement_en.py)
    "Signed Mia up for the chess club.",
    # a bare "Claimed" heads a write, no report of words (en.yaml quotation, before)
    "Claimed the delay compensation from the rail company.",
]

# what the new rules must leave alone: still claims
STILL_CLAIMS = [
    "Confirmed the booking and the invoice is on its way to you by email.",  # "confirmed", not "confirm"
    "I signed the form and the copy is in your inbox.",  # the assistant's past, not an imperative
    "Paid the water bill on Oct 2 from your checking account.",  # a date inside a report, not a record's entry
    "Booked Friday's table; it is not yet confirmed by the restaurant, but the slot is held.",
    "If it helps, your order is cancelled and the refund is on its way.",  # a speech-act "if"
    "I filled in the claim form and hit Submit.",  # the part before opens with a past, not a base form
    "I've translated your CV into two languages.",  # the assistant's act: no gated rule
    "Just a quick note: I've cancelled the order.",  # a note is no display noun
    "Your table for two is reserved at 7:30.",  # "at" + a time is no record's entry
    "✅ Renewed your passport appointment for the 9th.",  # a mark before a report is no key
    "From your inbox: I archived the 40 oldest newsletters.",  # the assistant's act: no gated rule
    "I emailed the school and the trip fees have been refunded.",  # the assistant's own message
    "I've updated the note so it reads: 'Call Mum at 6'.",  # "it reads:" after the assistant's edit
    "I claimed the deposit back from the letting agent.",  # I + claimed is a write
]

# what the narrowed rules must still set aside
STILL_NOT_CLAIMS = [
    "The pool is closed until May.",  # a state framed by "until"
]


@pytest.mark.parametrize(("rule", "sentence"), RULE_CASES)
def test_each_round6_rule_sets_aside_its_own_sentence(guard: ReplyGuard, rule: str, sentence: str) -> None:
    assert_rule_sets_aside(guard, rule, sentence)


@pytest.mark.parametrize("reply", NOT_CLAIMS)
def test_what_round6_reads_as_no_claim(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en-US", [])
    assert not verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", CLAIMS)
def test_what_round6_reads_as_a_claim(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en-US", [])
    assert verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", STILL_CLAIMS)
def test_round6_rules_leave_these_claims_alone(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en-US", [])
    assert verdict.replaced, verdict.explanation


@pytest.mark.parametrize("reply", STILL_NOT_CLAIMS)
def test_round6_narrowed_rules_still_set_these_aside(guard: ReplyGuard, reply: str) -> None:
    verdict = guard.check(reply, "en-US", [])
    assert not verdict.replaced, verdict.explanation
