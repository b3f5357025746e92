"""Message bodies carry their id and put time, padded to size; foreign bodies are flagged."""

import pytest

from lab.design import message


def test_round_trip_and_padding():
    body = message.encode("p3:17", 123456789, 64)
    assert len(body) == 64
    assert message.decode(body) == ("p3:17", 123456789)
    assert message.split_id("p3:17") == ("p3", 17)


def test_a_small_size_keeps_the_whole_header():
    body = message.encode("p0:1", 5, 1)
    assert message.decode(body) == ("p0:1", 5)


@pytest.mark.parametrize("body", [b"", b"garbage", b"p0:x 12\n", b"\xff\xfe 1\n", b"p0:1 abc\n"])
def test_foreign_bodies_get_a_stable_unexpected_id(body):
    msg_id, put_ns = message.decode(body)
    assert msg_id.startswith("?") and put_ns is None
    assert message.decode(body)[0] == msg_id


def test_split_id_rejects_non_ids():
    with pytest.raises(ValueError):
        message.split_id("nocolon")


def test_a_body_of_zero_bytes_says_so_in_its_id():
    # what a log replays where a record's header was written and its body never was
    assert message.decode(bytes(100)) == ("?zeros-100", None)
    assert message.decode(bytes(99) + b"x")[0] != "?zeros-99"
