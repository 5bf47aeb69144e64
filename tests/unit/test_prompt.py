from inference.config import BOS
from inference.prompt import chat_prompt


def test_transcript_lines_then_the_assistant_header_bos_first():
    tokens = chat_prompt([("user", "Hi"), ("assistant", "Hello"), ("user", "Bye é")], system="Be brief")
    assert tokens[0] == BOS
    text = bytes(tokens[1:]).decode()
    assert text == "system: Be brief\nuser: Hi\nassistant: Hello\nuser: Bye é\nassistant: "


def test_a_final_assistant_turn_is_continued():
    tokens = chat_prompt([("user", "Count"), ("assistant", "1, 2,")])
    assert bytes(tokens[1:]).decode() == "user: Count\nassistant: 1, 2,"
