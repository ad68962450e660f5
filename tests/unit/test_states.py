"""states.name: the word for a state, as the protobuf enum spells it (kept in the settled event's ``state``)."""

from __future__ import annotations

import pytest

from countersign.store import states
from countersign.v1 import common_pb2


@pytest.mark.parametrize("value", range(-3, 40))
def test_a_states_word_is_the_enums_name_without_its_prefix_and_a_number_that_is_none_is_refused(value: int) -> None:
    try:
        expected = common_pb2.ActionState.Name(value).removeprefix("ACTION_STATE_")  # type: ignore[arg-type]
    except ValueError as exc:
        with pytest.raises(ValueError, match=str(exc)):
            states.name(value)
    else:
        assert states.name(value) == expected
