"""`python -m generator validate FILE... [-f MORE] [--set K=V]...`: the schema, then the semantic rules.

Exit 0 when valid, 1 when any file has an error (or a warning with --strict), 2 for usage
errors (missing file, unreadable YAML). Never modifies a file."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from generator.core.errors import InputError
from generator.validate.findings import Finding, has_errors
from generator.values.layers import Configuration, add_layer_arguments, configurations

HELP = "check values files: schema, then the semantic rules"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from generator.core.arguments import add_release_name

    p.add_argument("files", nargs="+", type=Path, metavar="FILE")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--strict", action="store_true", help="fail on warnings too")
    p.add_argument(
        "--no-chart-defaults",
        action="store_true",
        help="check the file alone, not merged over the chart's values.yaml as helm install does",
    )
    add_release_name(p, "Helm release name the file will be installed as (names are checked); default nemo-rl")
    add_layer_arguments(p, "with any of these, FILE and every -f are merged into one configuration")


def _reports(args: argparse.Namespace) -> list[tuple[Configuration, list[Finding]]]:
    found = configurations(args.files, args.more, args.sets, not args.no_chart_defaults)
    from generator.validate.values import validate_values  # its rules load while Helm renders the first file

    return [(c, validate_values(c.values, args.release, c.set_file_keys)) for c in found]


def _line(config: Configuration, finding: Finding) -> str:
    """A finding's line; with layers, it names the layer that set the key."""
    source = config.origin(finding.key)
    return finding.line(config.name) + (f" [set by {source}]" if source else "")


def run(args: argparse.Namespace) -> int:
    try:
        reports = _reports(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = any(has_errors(f, args.strict) for _, f in reports)
    if args.format == "json":
        out = {
            "valid": not failed,
            "files": [
                {
                    "file": c.name,
                    "valid": not has_errors(f, args.strict),
                    "findings": [x.as_dict() | ({"set_by": o} if (o := c.origin(x.key)) else {}) for x in f],
                }
                for c, f in reports
            ],
        }
        print(json.dumps(out, indent=2))
    else:
        for config, findings in reports:
            for f in findings:
                print(_line(config, f))
        errors = sum(1 for _, f in reports for x in f if x.level == "error")
        warnings = sum(1 for _, f in reports for x in f if x.level == "warning")
        verdict = "invalid" if failed else "valid"
        print(f"{verdict}: {len(reports)} file(s), {errors} error(s), {warnings} warning(s)", file=sys.stderr)
    return 1 if failed else 0
