"""`python -m generator doctor VALUES [-f MORE] [--set K=V] [--context C] [--namespace N]`: read-only
checks of the live cluster against the values, before `helm install`.

The values merge exactly as `validate` merges them and render with the pinned Helm 4 for the
release name and namespace; each check prints pass, fail or warn on one line, with the fix.
Exit 0 when nothing failed, 1 when a check failed (or warned, with --strict), 2 for usage and
environment errors (a values file that cannot be read or rendered, no kubeconfig, an API server
that cannot be reached or refuses the credentials). It never creates, updates, patches or deletes
anything: it reads, asks the API server what you may do (SelfSubjectAccessReview), and sends the
release's objects and pods as server-side dry runs (dryRun=All: admitted or refused, never stored)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "check the live cluster against a values file before helm install (read-only)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from generator.cluster.kube import add_cluster_arguments
    from generator.core.arguments import add_release_name, release_name
    from generator.values.layers import add_layer_arguments

    p.add_argument("values", type=Path, metavar="VALUES", help="the values file you will install with")
    add_release_name(p, "the Helm release name you will install as; default nemo-rl", type=release_name)
    add_cluster_arguments(p)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--strict", action="store_true", help="fail on warnings too")
    add_layer_arguments(p, "merged with VALUES exactly as `validate` merges them")


def run(args: argparse.Namespace) -> int:
    from generator.cluster import report
    from generator.cluster.checks import run as run_checks
    from generator.cluster.checks.context import Context
    from generator.cluster.kube import ClusterError, connect
    from generator.cluster.release import render
    from generator.core.errors import InputError
    from generator.values.layers import configurations

    try:
        config = configurations([args.values], args.more, args.sets)[0]
        kube = connect(args.kubeconfig, args.context, args.namespace)
        kube.version()  # reachable, and the credentials hold: else one line and exit 2
        rendered = render(config, args.release, kube.namespace)
        results = run_checks(Context(kube, rendered))
    except (InputError, ClusterError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    header = report.Header(kube.server, kube.context, kube.namespace, args.release, config.name)
    if args.format == "json":
        print(report.as_json(header, results, args.strict))
    else:
        print(f"doctor: {config.name} as release {args.release} in namespace {kube.namespace} on {kube.server} (context {kube.context})")
        for r in results:
            print(r.line())
        print(report.summary(results, args.strict), file=sys.stderr)
    return 1 if report.failing(results, args.strict) else 0
