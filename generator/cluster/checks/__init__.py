"""doctor's checks, in the order they print: each a function of the Context, one Result each.

A check that the caller may not read for (403) becomes a warning saying what was not checked;
any other error answer of the API server, or an object in a shape not foreseen, a warning naming
it. An unreachable or unauthorised
API server stops everything (ClusterError: one line, exit status 2).
"""

from __future__ import annotations

from collections.abc import Callable

from generator.cluster.checks import access, kuberay, kueue, networking, nodes, pod_security, quotas, storage, tokens
from generator.cluster.checks.context import Context
from generator.cluster.kube import ApiError, Forbidden
from generator.cluster.report import Result, warned

CHECKS: tuple[tuple[str, Callable[[Context], Result]], ...] = (
    ("api", access.api),
    ("permissions", access.permissions),
    ("kuberay-crd", kuberay.check),
    ("rdma-installer", networking.installer),
    ("gke-networks", networking.networks),
    ("gpu-nodes", nodes.check),
    ("storage", storage.check),
    ("token-secret", tokens.check),
    ("kueue-queue", kueue.check),
    ("pod-security", pod_security.check),
    ("quotas", quotas.check),
)


def run(ctx: Context) -> list[Result]:
    results = []
    for name, check in CHECKS:
        try:
            results.append(check(ctx))
        except Forbidden as e:
            results.append(warned(name, f"not checked: {e}", "ask for read access to it, or run doctor as someone who has it"))
        except ApiError as e:
            results.append(warned(name, f"not checked: the API server answered {e.code} to GET {e.path}: {e}"))
        except (KeyError, TypeError, ValueError, AttributeError) as e:  # an object in a shape not foreseen
            results.append(warned(name, f"not checked: an answer of the API server had an unexpected shape ({type(e).__name__}: {e})"))
    return results
