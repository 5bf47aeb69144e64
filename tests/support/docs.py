"""Checks the docs against the code, so that no command, target, module or link in them goes stale.

Every shell line in a fenced `bash`/`sh`/`console` block (or one with no language) is read as a shell
would split it: `graystack ...` commands are parsed by the real click CLI in-process (no callback runs,
nothing starts), `make TARGET` must be a Makefile target, `python -m MODULE` an importable module. Inline
code spans naming `make TARGET` or `python -m MODULE` are checked too, and every relative link must reach
a file (and, for a Markdown file, a heading)."""

from __future__ import annotations

import importlib.util
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import click

SHELL_FENCES = {"", "bash", "sh", "shell", "console"}
OPERATORS = {"&&", "||", "|", ";", "&"}
REDIRECTS = {">", ">>", "<", "2>", "&>"}
CHECKED_TYPES = (
    click.Choice,
    click.types.IntParamType,
    click.types.FloatParamType,
    click.types.BoolParamType,
)

FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`([^`\n]+)`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
MAKE_TARGET = re.compile(r"^([A-Za-z0-9_.-]+)\s*:(?!=)")


@dataclass(frozen=True)
class Problem:
    """One stale thing in one doc, where a reader would find it."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class ShellLine:
    """A logical shell line of a fenced block: continuations joined, comments dropped, split into words."""

    line: int
    words: tuple[str, ...]


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's fragment in a Markdown text (outside fenced blocks)."""
    found: set[str] = set()
    for _, line, fenced in _lines(markdown):
        match = None if fenced is not None else HEADING.match(line)
        if match:
            found.add(github_anchor(match.group(1)))
    return found


def makefile_targets(makefile: str) -> set[str]:
    """The targets a `make TARGET` may name: every rule's plain name and every `.PHONY` entry."""
    targets = {m.group(1) for line in makefile.splitlines() if (m := MAKE_TARGET.match(line))}
    for line in makefile.splitlines():
        if line.startswith(".PHONY:"):
            targets.update(line.split(":", 1)[1].split())
    return targets - {".PHONY"}


def _lines(markdown: str) -> Iterator[tuple[int, str, str | None]]:
    """(line number, text, the fence's language or None outside a fence), fence lines themselves left out."""
    language: str | None = None
    for number, line in enumerate(markdown.splitlines(), start=1):
        match = FENCE.match(line)
        if match:
            language = match.group(2).lower() if language is None else None
            continue
        yield number, line, language


def shell_lines(markdown: str) -> list[ShellLine]:
    """Logical shell lines of the shell fences: a line ending in `\\` or inside an open quote goes on."""
    result: list[ShellLine] = []
    pending, start = "", 0
    for number, line, language in _lines(markdown):
        if language not in SHELL_FENCES:
            pending = ""
            continue
        if not pending:
            start = number
        pending += line + "\n"
        if pending.rstrip().endswith("\\"):
            pending = pending.rstrip()[:-1] + " "
            continue
        try:
            words = _split(pending)
        except ValueError:
            continue
        pending = ""
        if words:
            result.append(ShellLine(start, words))
    return result


def _split(text: str) -> tuple[str, ...]:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return tuple(lexer)


def commands(words: tuple[str, ...]) -> Iterator[list[str]]:
    """The simple commands of a shell line: split at `&&`, `|`, `;`, `&`; redirections and `VAR=x` prefixes dropped."""
    command: list[str] = []
    skip = False
    for word in (*words, ";"):
        if skip:
            skip = False
        elif word in REDIRECTS:
            skip = True
        elif word in OPERATORS:
            while command and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", command[0]):
                command.pop(0)
            if command:
                yield command
            command = []
        else:
            command.append(word)


class DocsChecker:
    """Checks Markdown files of one repository against its CLI, Makefile and modules."""

    def __init__(self, root: Path, cli: click.Group, not_yet_runnable: Mapping[str, str]) -> None:
        self.root = root
        self.cli = cli
        self.not_yet_runnable = dict(not_yet_runnable)
        self.targets = makefile_targets((root / "Makefile").read_text())
        self.allowed_seen: set[str] = set()

    def check_file(self, path: Path) -> list[Problem]:
        return self.check_text(path.read_text(), path)

    def check_text(self, markdown: str, path: Path) -> list[Problem]:
        """Every problem in one Markdown text, which is read as if it lay at `path`."""
        name = path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else str(path)
        problems = [Problem(name, line, message) for line, message in self._code(markdown)]
        problems += [Problem(name, line, message) for line, message in self._prose(markdown, path)]
        return sorted(problems, key=lambda p: p.line)

    def _code(self, markdown: str) -> Iterator[tuple[int, str]]:
        for shell_line in shell_lines(markdown):
            for command in commands(shell_line.words):
                for message in self._command(command):
                    yield shell_line.line, message

    def _command(self, words: list[str]) -> list[str]:
        """What is wrong with one simple command, unless the not-yet-runnable list names it (then: nothing,
        until it runs)."""
        program = Path(words[0]).name
        line = " ".join([program, *words[1:]])
        problems = self._problems(program, words[1:])
        allowed = next((entry for entry in self.not_yet_runnable if line.startswith(entry)), None)
        if allowed is None:
            return [f"`{line}`: {problem}" for problem in problems]
        self.allowed_seen.add(allowed)
        if problems:
            return []
        return [f"`{line}` now runs: remove {allowed!r} from the not-yet-runnable list"]

    def _problems(self, program: str, args: list[str]) -> list[str]:
        if program == "graystack":
            return command_problems(self.cli, args)
        if program == "make":
            targets = [word for word in args if "=" not in word and not word.startswith("-")]
            return [
                f"no target `{target}` in the Makefile" for target in targets if target not in self.targets
            ]
        if (
            program.startswith("python")
            and len(args) > 1
            and args[0] == "-m"
            and not self._module_exists(args[1])
        ):
            return [f"no module `{args[1]}`"]
        return []

    def _module_exists(self, module: str) -> bool:
        base = self.root.joinpath(*module.split("."))
        if base.with_suffix(".py").is_file() or (base / "__main__.py").is_file():
            return True
        if (self.root / module.split(".")[0]).exists():
            return False
        try:
            return importlib.util.find_spec(module) is not None
        except ImportError:
            return False

    def _prose(self, markdown: str, path: Path) -> Iterator[tuple[int, str]]:
        for number, line, language in _lines(markdown):
            if language is not None:
                continue
            for span in INLINE_CODE.findall(line):
                words = span.split()
                if words and words[0] in ("make", "python") and not any(c in span for c in "|<>[]"):
                    for message in self._command(words):
                        yield number, message
            for target in LINK.findall(INLINE_CODE.sub("", line)):
                message = self._link(target, path)
                if message:
                    yield number, message

    def _link(self, target: str, path: Path) -> str:
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            return ""
        file_part, _, fragment = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            return f"link `{target}`: no such file"
        if fragment and resolved.suffix == ".md" and fragment not in anchors(resolved.read_text()):
            return f"link `{target}`: no heading `#{fragment}` in {resolved.name}"
        return ""


def command_problems(cli: click.Group, args: list[str]) -> list[str]:
    """Why `graystack ARGS` would not parse: an unknown command or option, an option missing its value, a
    value its type refuses (choices, numbers), a missing or extra argument. Nothing is run."""
    command: click.Command = cli
    ctx = click.Context(cli, info_name="graystack")
    while isinstance(command, click.Group) and args and not args[0].startswith("-"):
        sub = command.get_command(ctx, args[0])
        if sub is None:
            return [f"no command `{args[0]}` (have: {', '.join(command.list_commands(ctx))})"]
        command, args = sub, args[1:]
        ctx = click.Context(command, info_name=command.name, parent=ctx)
    if isinstance(command, click.Group) and not args:
        return []
    try:
        opts, extra, _ = command.make_parser(ctx).parse_args(args=list(args))
    except click.UsageError as error:
        return [error.format_message()]
    problems = [f"unexpected argument {word!r}" for word in extra]
    for param in command.params:
        if isinstance(param, click.Argument) and param.required and not _given(opts.get(param.name)):
            problems.append(f"missing argument {param.human_readable_name}")
        elif param.name in opts and isinstance(param.type, CHECKED_TYPES):
            problems += _refused_values(param, opts[param.name], ctx)
    return problems


def _given(raw: object) -> bool:
    """Whether the parser saw a value (click marks one it did not see with None, () or a sentinel)."""
    return isinstance(raw, str) or (isinstance(raw, list | tuple) and len(raw) > 0)


def _refused_values(param: click.Parameter, raw: object, ctx: click.Context) -> list[str]:
    values = raw if isinstance(raw, list | tuple) else [raw]
    problems = []
    for value in values:
        if not isinstance(value, str):
            continue
        try:
            param.type.convert(value, param, ctx)
        except click.BadParameter as error:
            problems.append(f"{param.human_readable_name}: {error.format_message()}")
    return problems
