"""The load test's conversation user (loadtests/conversation.py, the locustfile's ConversationUser): one
identity per user, messages that grow by the answer and one new message per turn, and the count of turns
that reached the variant and the pod of their previous turn. Locust itself runs the user, against a small
real server that records every request and answers from a variant and a pod fixed by the turn."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from starlette.types import Receive, Scope, Send

from graystack.local.processes import wait_until
from graystack.local.standin import POD_HEADER, read_body
from loadtests.conversation import USER_HEADER, Conversation, Reached, Stickiness
from loadtests.launch import LOCUSTFILE
from tests.support.threaded_server import served

USERS = 3
TURNS = 3
LOCUST_LIMIT_S = 120  # what a run may take to give what a test needs


def test_a_conversation_grows_by_each_answer_and_counts_where_its_turns_went():
    tally = Stickiness()
    conversation = Conversation("user-1", 2, {8: 1}, random.Random(1))
    first = conversation.ask()
    conversation.answered(first, "one", Reached("a", "p1"), tally)
    second = conversation.ask()
    assert second[:2] == [*first, {"role": "assistant", "content": "one"}]
    assert len(second) == 3
    assert second[2]["role"] == "user"
    assert not conversation.done
    conversation.answered(second, "two", Reached("a", "p2"), tally)
    assert conversation.done
    assert (tally.turns, tally.same_variant, tally.pod_turns, tally.same_pod) == (1, 1, 1, 0)
    assert tally.drain() == {"turns": 1, "same_variant": 1, "pod_turns": 1, "same_pod": 0}
    assert tally.variant_share is None


def test_a_turn_past_the_byte_budget_starts_a_new_conversation_from_its_message():
    tally = Stickiness()
    conversation = Conversation("user-1", 4, {40: 1}, random.Random(1), max_bytes=100)
    first = conversation.ask()
    conversation.answered(first, "x" * 20, Reached("a", None), tally)
    second = conversation.ask()  # 40 + 20 + 40 bytes: within the budget
    assert len(second) == 3
    conversation.answered(second, "y" * 20, Reached("a", None), tally)
    third = conversation.ask()  # 120 bytes would pass it: a new conversation
    assert [m["role"] for m in third] == ["user"]
    assert third[0]["content"] not in (first[0]["content"], second[2]["content"])
    conversation.answered(third, "z", Reached("b", None), tally)
    assert tally.turns == 1  # the new conversation's first turn is not compared with the old one's
    assert not conversation.done


def test_a_budget_smaller_than_a_prompt_is_refused():
    with pytest.raises(ValueError, match="4096-byte prompt"):
        Conversation("user-1", 4, {64: 1, 4096: 1}, random.Random(1), max_bytes=1000)


def test_a_pod_is_compared_only_when_both_answers_name_one():
    tally = Stickiness()
    tally.count(Reached("a", None), Reached("a", "p1"))
    tally.count(Reached("a", "p1"), Reached("b", "p1"))
    assert (tally.turns, tally.same_variant, tally.pod_turns, tally.same_pod) == (2, 1, 1, 1)


class Recorder:
    """Answers each Messages request with a stream whose text is unique; turn 1 and 2 from variant `a`,
    turn 3 from `b` (so the second turn stays, the third moves); turn 1 from pod `p1`, later ones from `p2`
    (the second moves, the third stays). Keeps every request's user header, body and answer."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict, str]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = json.loads(await read_body(receive))
        user = dict(scope["headers"]).get(USER_HEADER.encode(), b"").decode()
        answer = f"answer-{len(self.requests)}"
        self.requests.append((user, body, answer))
        turn = (len(body["messages"]) + 1) // 2
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"x-graystack-variant", b"a" if turn <= 2 else b"b"),
            (POD_HEADER.encode(), b"p1" if turn == 1 else b"p2"),
        ]
        delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": answer}}
        events = [("message_start", {"type": "message_start"}), ("content_block_delta", delta)]
        events += [("content_block_delta", delta | {"delta": {"type": "text_delta", "text": "!"}})]
        events += [("message_stop", {"type": "message_stop"})]
        stream = "".join(f"event: {kind}\ndata: {json.dumps(data)}\n\n" for kind, data in events)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": stream.encode()})


def run_locust(port: int, folder: Path, conversations: str | None, enough: Callable[[], bool]) -> dict:
    """Locust against `port` until `enough()` holds (bounded for a machine half as fast), then stopped
    as a user stops it, by SIGTERM, on which it writes its summary."""
    env = {**os.environ, "LOAD_SHAPE": "none", "LOADTEST_PROMPT_LENGTHS": "16", "LOADTEST_THINK_TIME": "0.01"}
    if conversations is not None:
        env["LOADTEST_CONVERSATIONS"] = conversations
    argv = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless", "--only-summary"]
    argv += ["--host", f"http://127.0.0.1:{port}", "-u", str(USERS), "-r", str(USERS)]
    argv += ["--run-time", f"{LOCUST_LIMIT_S + 30}s"]
    argv += ["--conversation-turns", str(TURNS), "--summary-dir", str(folder), "--stop-timeout", "2"]
    locust = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(enough, LOCUST_LIMIT_S, "what the test needs from Locust", interval=0.1)
    finally:
        locust.send_signal(signal.SIGTERM)
        output, _ = locust.communicate(timeout=60)
    assert locust.returncode == 0, output[-4000:]
    return json.loads((folder / "summary.json").read_text())


def whole_conversations(recorder: Recorder) -> bool:
    """Every user has sent the last turn of a conversation."""
    last_turns = [user for user, body, _ in list(recorder.requests) if len(body["messages"]) == 2 * TURNS - 1]
    return len(set(last_turns)) == USERS


def test_the_conversation_user_keeps_its_identity_grows_its_messages_and_counts_its_turns(tmp_path):
    recorder = Recorder()
    with served(recorder, "the recording server") as port:
        # a fixed 3 s gave 1 turn a user on a machine half as fast (issue 34): wait for what is judged
        result = run_locust(port, tmp_path, "1", lambda: whole_conversations(recorder))
    by_user: dict[str, list[tuple[dict, str]]] = {}
    for user, body, answer in recorder.requests:
        assert body["metadata"] == {"user_id": user}, "the header and the body name different users"
        by_user.setdefault(user, []).append((body, answer))
    assert len(by_user) == USERS
    turns: Counter[int] = Counter()
    for sent in by_user.values():
        for (previous, answer), (body, _) in itertools.pairwise(sent):
            messages = body["messages"]
            if len(messages) == 1:  # a new conversation, after the last turn of the one before
                assert len(previous["messages"]) == 2 * TURNS - 1
                continue
            grown = [*previous["messages"], {"role": "assistant", "content": answer + "!"}]
            assert messages[:-1] == grown, "a turn does not carry the conversation before it"
            assert messages[-1]["role"] == "user"
        turns.update((len(body["messages"]) + 1) // 2 for body, _ in sent)
    assert turns[TURNS] >= USERS, f"too few whole conversations to judge: {turns}"
    counted = result["conversations"]
    # A turn the run's end cut off is on the server's list but was never counted: at most one per user.
    assert 0 <= turns[2] - counted["same_variant"] <= USERS
    assert 0 <= turns[3] - counted["same_pod"] <= USERS
    assert 0 <= turns[2] + turns[3] - counted["turns"] <= USERS
    assert counted["pod_turns"] == counted["turns"]


def test_without_the_option_only_single_messages_are_sent_and_the_summary_has_no_conversations(tmp_path):
    recorder = Recorder()
    with served(recorder, "the recording server") as port:
        result = run_locust(port, tmp_path, None, lambda: len(recorder.requests) >= USERS)
    assert recorder.requests
    assert {len(body["messages"]) for _, body, _ in recorder.requests} == {1}
    assert all("metadata" not in body for _, body, _ in recorder.requests)
    assert result["conversations"] is None
