"""The store's wire codec agrees with boto3's TypeSerializer/TypeDeserializer on every value Clarify stores."""
from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.store.attrs import from_attr, to_attr

plain = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**30, max_value=10**30) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


def _boto_plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value)
    if isinstance(value, dict):
        return {k: _boto_plain(v) for k, v in value.items()}
    if isinstance(value, (list, set)):
        return [_boto_plain(v) for v in value]
    return value


@settings(max_examples=300, deadline=None)
@given(plain)
def test_to_attr__any_stored_value__same_shape_as_boto3_and_round_trips(value: Any) -> None:
    assert to_attr(value) == TypeSerializer().serialize(value)
    assert from_attr(to_attr(value)) == value
    assert from_attr(to_attr(value)) == _boto_plain(TypeDeserializer().deserialize(to_attr(value)))


def test_to_attr__tuples_are_lists__floats_and_sets_refused() -> None:
    assert to_attr(("a", 1)) == {"L": [{"S": "a"}, {"N": "1"}]}
    with pytest.raises(TypeError):
        to_attr(1.5)
    with pytest.raises(TypeError):
        to_attr({"a"})


def test_from_attr__sets_and_fractional_numbers_from_other_writers__plain_values() -> None:
    assert from_attr({"SS": ["a", "b"]}) == ["a", "b"]
    assert from_attr({"NS": ["1", "2"]}) == [1, 2]
    assert from_attr({"N": "3.0"}) == 3 and from_attr({"N": "1E+2"}) == 100
    with pytest.raises(TypeError):
        from_attr({"X": 1})
