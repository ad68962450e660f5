"""`countersign serve | demo`: argument parsing and wiring only."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path

from countersign.sidecar import settings as settings_mod
from countersign.sidecar.errors import RegistryError, SettingsError


class _JsonLog(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if msg.startswith("{"):
            return msg
        out = {"level": record.levelname.lower(), "logger": record.name, "message": msg}
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out)


def _logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLog())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="countersign", description="The Countersign sidecar.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the sidecar", description=(
        "Run the sidecar. Every setting is a flag and a COUNTERSIGN_* environment variable; durations "
        "take 250ms, 5s, 5m or 24h."))
    settings_mod.add_arguments(serve)
    demo = sub.add_parser("demo", help="the walkthrough: embedded Redis, the example service, a scripted agent")
    demo.add_argument("--verbose", action="store_true", help="also show the sidecar's and service's logs")
    args = parser.parse_args(argv)

    if args.command == "serve":
        try:
            settings = settings_mod.from_args(args)
        except SettingsError as exc:
            print(f"countersign: {exc}", file=sys.stderr)
            return 2
        _logging(settings.log_level)
        from countersign.sidecar.app import serve as run

        try:
            asyncio.run(run(settings))
        except (SettingsError, RegistryError) as exc:
            print(f"countersign: {exc}", file=sys.stderr)
            return 2
        return 0

    root = Path.cwd()
    if not (root / "examples" / "walkthrough.py").exists():
        print("countersign demo runs from a source checkout (it needs examples/); cd to the repository",
              file=sys.stderr)
        return 2
    sys.path.insert(0, str(root))
    from examples import walkthrough

    return walkthrough.main(verbose=args.verbose)


if __name__ == "__main__":
    sys.exit(main())
