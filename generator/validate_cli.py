"""`python -m generator validate FILE...`: the schema, then the semantic rules."""

from __future__ import annotations

import argparse
import json
import sys

from .schema import iter_errors
from .values_io import InputError, load_values


def run(args: argparse.Namespace) -> int:
    results = []
    for path in args.files:
        try:
            doc = load_values(path)
        except InputError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        errors = [{"file": str(path), "key": e.path, "level": "error", "message": e.message} for e in iter_errors(doc)]
        results.extend(errors)
    if args.format == "json":
        print(json.dumps({"findings": results, "valid": not results}, indent=2))
    else:
        for r in results:
            print(f"{r['file']}: {r['key']}: {r['message']}")
        if not results:
            print(f"ok: {len(args.files)} file(s) valid", file=sys.stderr)
    return 1 if results else 0
