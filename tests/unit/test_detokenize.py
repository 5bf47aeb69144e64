"""Streamed text is valid, complete, and never shows a stop sequence or any part of one."""

from hypothesis import given, settings
from hypothesis import strategies as st

from inference.detokenize import TextAssembler


def stream(data: bytes, stops: list[str]) -> tuple[list[str], str | None]:
    assembler = TextAssembler(stops)
    chunks = []
    for byte in data:
        text, stop = assembler.push(byte)
        chunks.append(text)
        if stop is not None:
            return chunks, stop
    chunks.append(assembler.flush())
    return chunks, None


def test_a_character_split_across_tokens_is_sent_whole():
    chunks, _ = stream("né€".encode(), [])
    assert chunks == ["n", "", "é", "", "", "€", ""]


def test_invalid_bytes_become_replacement_characters():
    assert "".join(stream(b"a\xffb\xc3", [])[0]) == "a\ufffdb\ufffd"


def test_a_stop_sequence_is_held_back_then_left_out():
    chunks, stop = stream(b"hello END more", ["END"])
    assert stop == "END"
    assert chunks == ["h", "e", "l", "l", "o", " ", "", "", ""]


def test_a_false_start_of_a_stop_sequence_is_released():
    chunks, stop = stream(b"ENx", ["END"])
    assert stop is None
    assert chunks == ["", "", "ENx", ""]


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=40) | st.text(max_size=20).map(str.encode),
    stops=st.lists(st.text(min_size=1, max_size=3), max_size=3),
)
def test_the_chunks_are_the_reply_up_to_the_first_stop(data, stops):
    chunks, stop = stream(data, stops)
    raw = [s.encode() for s in stops]
    ends = [i for i in range(1, len(data) + 1) if any(data[:i].endswith(r) for r in raw)]
    if ends:
        first = ends[0]
        assert stop is not None
        assert data[:first].endswith(stop.encode())
        expected = data[: first - len(stop.encode())]
    else:
        assert stop is None
        expected = data
    assert "".join(chunks) == expected.decode("utf-8", errors="replace")
