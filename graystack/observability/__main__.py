"""`python -m graystack.observability [--check]`: write the dashboards and the alert rules where the
Helm chart reads them, or (`--check`) exit 1 naming each committed file that differs from the code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from graystack.observability.files import outputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m graystack.observability", description=__doc__)
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root")
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    stale: list[str] = []
    for relative, text in outputs().items():
        path = args.root / relative
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(relative))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {relative}")
    for name in stale:
        print(f"{name} differs from what graystack/observability generates: run `make dashboards`")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
