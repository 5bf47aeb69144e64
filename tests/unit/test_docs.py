"""The docs against the code: every `graystack` command line, `make` target, `python -m` module and
relative link in README.md and docs/*.md exists, so none goes stale unnoticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from graystack.cli import main
from tests.support.docs import DocsChecker, github_anchor

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

# Doc lines that describe an interface being built, each with why. Remove an entry when its command exists:
# the check then reports the entry as stale.
NOT_YET_RUNNABLE: dict[str, str] = {}


def checker(not_yet_runnable: dict[str, str] | None = None) -> DocsChecker:
    return DocsChecker(ROOT, main, NOT_YET_RUNNABLE if not_yet_runnable is None else not_yet_runnable)


def problems_in(markdown: str, not_yet_runnable: dict[str, str] | None = None) -> list[str]:
    return [p.message for p in checker(not_yet_runnable).check_text(markdown, ROOT / "docs" / "made-up.md")]


def test_the_docs_match_the_code():
    docs_checker = checker()
    problems = [str(problem) for path in DOCS for problem in docs_checker.check_file(path)]
    assert not problems, "stale docs:\n" + "\n".join(problems)
    assert set(NOT_YET_RUNNABLE) == docs_checker.allowed_seen, "a not-yet-runnable entry names no doc line"


def test_the_readme_links_every_page_of_the_guide():
    readme = (ROOT / "README.md").read_text()
    assert [page for page in DOCS[1:] if f"({page.relative_to(ROOT).as_posix()})" not in readme] == []


def test_a_misspelt_option_fails():
    made_up = "```bash\ngraystack weight zero-layer=50 --segmnt mobile   # only mobile\n```\n"
    [problem] = problems_in(made_up)
    assert problem.startswith("`graystack weight zero-layer=50 --segmnt mobile`: ")
    assert "--segmnt" in problem.split(": ", 1)[1]


def test_a_correct_line_passes():
    assert (
        problems_in(
            "```bash\ngraystack weight zero-layer=50 --segment mobile\ngraystack status --json\n```\n"
        )
        == []
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("graystack wieght zero-layer=20", "no command `wieght`"),
        ("graystack weights chek FILE", "no command `chek`"),
        ("graystack status --interval", "requires an argument"),
        ("graystack status --interval often", "interval"),
        ("graystack fault zero-layer --error-rate 2", "--error-rate"),
        ("graystack weights check", "missing argument"),
        ("graystack fault zero-layer --clear && graystack rety", "no command `rety`"),
        ("graystack status --json | jq .x && graystack status --jsn", "--jsn"),
        (
            ".venv/bin/graystack gateway --spec s.yaml \\\n    --metrics-targt http://x/metrics",
            "--metrics-targt",
        ),
        ("GRAYSTACK_ADMIN_URL=http://x graystack status --wach", "--wach"),
        ("make tests", "`make tests`: no target `tests` in the Makefile"),
        ("make soak SOAK_DURATION=5m HOST=http://x unit-tests", "no target `unit-tests`"),
        (".venv/bin/python -m bench.flip_latencyy", "no module `bench.flip_latencyy`"),
    ],
)
def test_each_kind_of_stale_line_fails(line, expected):
    [problem] = problems_in(f"```bash\n{line}\n```\n")
    assert expected in problem


def test_lines_outside_shell_blocks_and_comments_are_not_commands():
    made_up = "```yaml\ngraystack: --nothing\n```\n```text\ngraystack up: a supervisor\n```\n```bash\nmake demo  # not graystack --x\n```\n"
    assert problems_in(made_up) == []


def test_a_quoted_argument_spanning_lines_is_one_command():
    made_up = "```bash\ncurl -d '{\"a\":\n  1}' localhost:8080\ngraystack statuz\n```\n"
    [problem] = problems_in(made_up)
    assert problem.startswith("`graystack statuz`: no command `statuz`")


def test_links_and_prose_targets():
    made_up = (
        "See [the spec](spec-and-routing.md), [its flips](spec-and-routing.md#flip-traffic-and-read-the-state), "
        "[benchmarks](../BENCHMARKS.md) and [the web](https://example.com).\n"
        "Broken: [gone](no-such-page.md), [bad anchor](spec-and-routing.md#no-such-heading); run `make nothing`.\n"
    )
    no_target, gone, bad_anchor = sorted(problems_in(made_up))
    assert "no-such-page.md" in gone
    assert "#no-such-heading" in bad_anchor
    assert "no target `nothing`" in no_target


def test_a_not_yet_runnable_line_is_skipped_until_it_runs():
    made_up = "```bash\ngraystack up --canary llama-b\n```\n"
    assert problems_in(made_up, {}) != []
    assert problems_in(made_up, {"graystack up --canary": "being built"}) == []
    [stale] = problems_in("```bash\ngraystack status\n```\n", {"graystack status": "was being built"})
    assert "now runs" in stale


def test_github_anchors():
    assert (
        github_anchor("Issue 16: no stream cut (chunked prefill, keep-alive)")
        == "issue-16-no-stream-cut-chunked-prefill-keep-alive"
    )
    assert (
        github_anchor("The first `make demo` from a fresh clone") == "the-first-make-demo-from-a-fresh-clone"
    )
    assert github_anchor("`analysis.max_effective_window`") == "analysismax_effective_window"
