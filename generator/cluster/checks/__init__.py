"""doctor's checks, in the order they print: each a function of the Context, one Result each.

A check may return several Results (dry-run: one line per refusal). A check that the caller may
not read for (403) is "not checked" (skip), naming the permission it
lacked; so is one that met any other error answer of the API server, or an object in a shape not
foreseen: doctor says "ready" only when every check ran. An unreachable or unauthorised API server
stops everything (ClusterError: one line, exit status 2).
"""

from __future__ import annotations

from collections.abc import Callable

from generator.cluster.checks import (
    access,
    dra,
    dry_run,
    kuberay,
    kueue,
    kueue_version,
    networking,
    nodes,
    pod_security,
    quotas,
    storage,
    tokens,
)
from generator.cluster.checks.context import Context
from generator.cluster.kube import ApiError, Forbidden
from generator.cluster.report import SKIP, Result, skipped

CHECKS: tuple[tuple[str, Callable[[Context], Result | list[Result]]], ...] = (
    ("api", access.api),
    ("permissions", access.permissions),
    ("kuberay-crd", kuberay.check),
    ("rdma-installer", networking.installer),
    ("gke-networks", networking.networks),
    ("gpu-nodes", nodes.check),
    ("dra-driver", dra.check),
    ("storage", storage.check),
    ("token-secret", tokens.check),
    ("kueue-queue", kueue.check),
    ("kueue-version", kueue_version.check),
    ("pod-security", pod_security.check),
    ("quotas", quotas.check),
    ("dry-run", dry_run.check),
)


def run(ctx: Context) -> list[Result]:
    results = []
    for name, check in CHECKS:
        try:
            result = check(ctx)
            results += result if isinstance(result, list) else [result]
        except Forbidden as e:
            results.append(skipped(name, str(e), e.permission))
        except ApiError as e:
            results.append(Result(name, SKIP, f"not checked: the API server answered {e.code} to GET {e.path}: {e}"))
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # an object in a shape not foreseen
            message = f"not checked: an answer of the API server had an unexpected shape ({type(e).__name__}: {e})"
            results.append(Result(name, SKIP, message))
    return results
