"""Pickled weights, recognised and described without ever being unpickled.

A pickle runs code when it is loaded, so the check never loads one: it recognises the file by its first
bytes (a torch.save ZIP, or a raw pickle's PROTO opcode) and lists the callables the pickle would
import, by walking its opcodes with `pickletools` (which executes nothing). A callable outside the
handful a plain state dict needs is named in the reason: it is what a booby-trapped file carries.
"""

from __future__ import annotations

import io
import pickletools
import zipfile
from pathlib import Path

PICKLE_SUFFIXES = frozenset({".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"})
ZIP_MAGIC = b"PK\x03\x04"
PICKLE_PROTO = 0x80
# What torch.save needs for a state dict of tensors; anything else is worth a warning.
PLAIN_GLOBALS = frozenset(
    {
        "collections OrderedDict",
        "torch._utils _rebuild_tensor_v2",
        "torch._utils _rebuild_parameter",
        "torch FloatStorage",
        "torch HalfStorage",
        "torch BFloat16Storage",
        "torch LongStorage",
        "torch IntStorage",
        "torch BoolStorage",
        "torch ByteStorage",
        "torch._tensor _rebuild_from_type_v2",
    }
)
MAX_PICKLE_BYTES = 64 * 1024 * 1024  # a state dict's pickle is small: the tensors' data lies beside it


def looks_pickled(prefix: bytes) -> bool:
    """A torch.save ZIP or a pickle of protocol 2 or later, from the file's first bytes."""
    return prefix.startswith(ZIP_MAGIC) or (len(prefix) >= 2 and prefix[0] == PICKLE_PROTO and prefix[1] <= 5)


def _pickle_bytes(path: Path) -> bytes:
    with path.open("rb") as handle:
        head = handle.read(4)
        handle.seek(0)
        if head != ZIP_MAGIC:
            return handle.read(MAX_PICKLE_BYTES)
        with zipfile.ZipFile(handle) as archive:
            names = [name for name in archive.namelist() if name.endswith("data.pkl")]
            if not names:
                return b""
            with archive.open(names[0]) as member:
                return member.read(MAX_PICKLE_BYTES)


def imported_globals(path: Path) -> list[str]:
    """The `module name` callables the pickle would import, in order of appearance; ValueError when
    the opcodes cannot be walked."""
    found: list[str] = []
    recent: list[str] = []  # STACK_GLOBAL takes module and name from the two strings pushed before it
    try:
        for opcode, argument, _ in pickletools.genops(io.BytesIO(_pickle_bytes(path))):
            if opcode.name == "GLOBAL":
                found.append(str(argument))
            elif opcode.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8"):
                recent = [*recent[-1:], str(argument)]
            elif opcode.name == "STACK_GLOBAL" and len(recent) == 2:
                found.append(" ".join(recent))
    except (ValueError, zipfile.BadZipFile, EOFError) as error:
        raise ValueError(f"its opcodes cannot be read: {error}") from None
    return list(dict.fromkeys(found))


def refusal(path: Path) -> str:
    """Why the check will not read this file, and what the pickle would have run."""
    reason = f"{path.name} is a pickle, never loaded here (it could run code): convert it to safetensors"
    try:
        unusual = [name for name in imported_globals(path) if name not in PLAIN_GLOBALS]
    except (OSError, ValueError):
        return reason
    if unusual:
        reason += f"; it would import {', '.join(unusual[:5])}"
    return reason
