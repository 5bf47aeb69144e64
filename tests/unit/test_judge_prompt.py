"""The judge's prompt file (`analysis.quality.judge.prompt`): a spec naming it is valid wherever it is
written, and the file is read where the judge runs. A missing or malformed one is refused there, naming
the field and the path; the gateway refuses such a spec on load and keeps its last good one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.app import quality_counts
from gateway.errors import SpecError
from gateway.quality.judge import TEMPLATE
from gateway.service import Gateway
from gateway.spec.model import RolloutSpec, validate_spec
from gateway.xds.cache import SnapshotCache
from tests.unit.test_spec import example

MINE = "Q: {request}\nA: {first}\nB: {second}\nBetter (A, B or TIE):"
BAD = [
    (None, "cannot read it: No such file or directory"),
    ("A: {first}", r"the judge's template must contain \{second\} exactly once"),
    (b"\xff {first} {second}", r"not UTF-8 text \(byte 0\)"),
]


def judged(prompt: Path | None) -> RolloutSpec:
    judge = {"url": "http://judge:8000/v1", "model": "judge"}
    if prompt is not None:
        judge["prompt"] = str(prompt)
    return validate_spec(example(analysis__quality={"judge": judge}))


def prompt_file(path: Path, content: str | bytes | None) -> Path:
    """`path` holding `content` (None: no file there)."""
    if isinstance(content, str):
        path.write_text(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    return path


def judge_template(spec: RolloutSpec) -> str:
    """The template of the judge the gateway builds for `spec`."""
    counts = quality_counts(spec.analysis.quality)
    assert counts is not None
    assert counts.judging is not None
    return counts.judging.judge.template


def prompt_of(spec: RolloutSpec) -> str | None:
    quality = spec.analysis.quality
    assert quality is not None
    assert quality.judge is not None
    return quality.judge.prompt


def refusal(path: Path, why: str) -> str:
    return rf"analysis\.quality\.judge\.prompt: {re.escape(str(path))}: {why}"


def test_a_prompt_file_absent_here_is_a_valid_spec(tmp_path):
    absent = tmp_path / "only-on-the-gateway" / "judge.txt"
    assert prompt_of(judged(absent)) == str(absent)


def test_the_judge_is_built_with_the_prompt_file_or_the_built_in_template(tmp_path):
    assert judge_template(judged(prompt_file(tmp_path / "judge.txt", MINE))) == MINE
    assert judge_template(judged(None)) == TEMPLATE


@pytest.mark.parametrize(("content", "why"), BAD)
def test_a_missing_or_malformed_prompt_file_is_refused_where_the_judge_is_built(tmp_path, content, why):
    path = prompt_file(tmp_path / "judge.txt", content)
    spec = judged(path)  # valid: the spec does not read the file
    with pytest.raises(SpecError, match=f"^{refusal(path, why)}"):
        quality_counts(spec.analysis.quality)


@pytest.mark.parametrize(("content", "why"), BAD)
def test_the_gateway_refuses_a_spec_whose_prompt_file_it_cannot_use_and_keeps_the_last_good(
    tmp_path, content, why
):
    told: list[str] = []
    gateway = Gateway(SnapshotCache(), Path("spec.yaml"), clock=lambda: 1000.0, on_refused=(told.append,))
    gateway.load(judged(None), "sha-1")
    live = gateway.live
    path = prompt_file(tmp_path / "judge.txt", content)
    gateway.load(judged(path), "sha-2")
    assert gateway.live is live
    last_error = gateway.status().spec.last_error
    assert last_error is not None
    assert re.fullmatch(rf"spec\.yaml: {refusal(path, why)}", last_error.message), last_error.message
    assert told == [last_error.message]

    path.write_text(MINE)
    gateway.load(judged(path), "sha-3")
    assert gateway.status().spec.last_error is None
    assert prompt_of(gateway.live) == str(path)
