"""`ray start` as KubeRay builds it from a RayCluster's `rayStartParams` and Ray parses it.

KubeRay (ray-operator/controllers/ray/common/pod.go, v1.3.2: `convertParamMap`,
`generateRayStartCommand`) writes each parameter as ` --key=value `, except that a value
"true"/"false" (any case) of an option other than `log-color` and `include-dashboard` becomes
the bare switch `--key` or nothing; the container runs the line through `bash -c`, so the shell
splits and unquotes it. Ray parses the words with its click command `ray.scripts.scripts.start`:
an unknown option, a value of the wrong type, a value on a switch, a switch without its value or
an extra word stops `ray start`, and the pod never joins. OPTIONS is that command's options (Ray
2.55.1, the kind of each: flag, int, float, bool, json, str or choice:a|b); a test holds it to the
installed Ray and runs every generated case through KubeRay's rule, bash and Ray's parser.
"""

from __future__ import annotations

import json
import shlex

OPTIONS: dict[str, str] = {
    "node-ip-address": "str",
    "address": "str",
    "port": "int",
    "node-name": "str",
    "redis-username": "str",
    "redis-password": "str",
    "redis-shard-ports": "str",
    "object-manager-port": "int",
    "node-manager-port": "int",
    "min-worker-port": "int",
    "max-worker-port": "int",
    "worker-port-list": "str",
    "ray-client-server-port": "int",
    "memory": "int",
    "object-store-memory": "int",
    "num-cpus": "int",
    "num-gpus": "int",
    "resources": "str",
    "head": "flag",
    "include-dashboard": "bool",
    "dashboard-host": "str",
    "dashboard-port": "int",
    "dashboard-agent-listen-port": "int",
    "dashboard-agent-grpc-port": "int",
    "runtime-env-agent-port": "int",
    "block": "flag",
    "plasma-directory": "str",
    "object-spilling-directory": "str",
    "autoscaling-config": "str",
    "no-redirect-output": "flag",
    "temp-dir": "str",
    "system-config": "json",
    "enable-object-reconstruction": "flag",
    "metrics-export-port": "int",
    "no-monitor": "flag",
    "tracing-startup-hook": "str",
    "ray-debugger-external": "flag",
    "disable-usage-stats": "flag",
    "labels": "str",
    "labels-file": "str",
    "include-log-monitor": "bool",
    "enable-resource-isolation": "flag",
    "system-reserved-cpu": "float",
    "system-reserved-memory": "int",
    "cgroup-path": "str",
    "proxy-server-url": "str",
    "log-style": "choice:auto|record|pretty",
    "log-color": "choice:auto|false|true",
    "verbose": "flag",  # a counter (-v, --verbose): takes no value
}

# KubeRay's switches with a true/false value kept as `--key=value` (pod.go: specialParameterOptions).
KEEPS_BOOLEAN_VALUE = frozenset({"log-color", "include-dashboard"})
# click's BoolParamType.bool_states (click/types.py, 8.5): the words it reads as true or false,
# stripped and lower-cased; the empty word is false.
CLICK_BOOLS = frozenset({"1", "0", "true", "false", "t", "f", "yes", "no", "y", "n", "on", "off", ""})
CLICK_FALSE = frozenset({"0", "false", "f", "no", "n", "off", ""})
# Set by KubeRay on every pod (setMissingRayStartParams): --block always, so a value is ignored.
KUBERAY_FORCES = frozenset({"block"})
# Set by the chart for the head (templates/raycluster.yaml): the probes and the launcher reach the
# dashboard on the pod's address.
CHART_SETS_HEAD = frozenset({"dashboard-host"})


def kuberay_words(key: str, value: str) -> str:
    """The text KubeRay writes on the command line for one parameter."""
    if value.lower() in ("true", "false") and key not in KEEPS_BOOLEAN_VALUE:
        return f" --{key} " if value.lower() == "true" else ""
    return f" --{key}={value} "


def _value_problem(kind: str, word: str) -> str | None:
    try:
        if kind == "int":
            int(word)
        elif kind == "float":
            float(word)
        elif kind == "json":
            json.loads(word)
    except ValueError:
        return f"{word!r} is not {'a whole number' if kind == 'int' else 'a number' if kind == 'float' else 'JSON'}"
    if kind == "bool" and word.strip().lower() not in CLICK_BOOLS:
        return f"{word!r} is not true or false"
    if kind.startswith("choice:") and word.casefold() not in kind.split(":", 1)[1].split("|"):  # case-insensitive in Ray
        return f"{word!r} is not one of {kind.split(':', 1)[1].replace('|', ', ')}"
    return None


def problem(key: str, value: str) -> str | None:
    """Why `ray start` refuses this parameter as KubeRay passes it, or None when Ray accepts it."""
    kind, lower = OPTIONS.get(key), value.lower()
    if lower == "false" and key not in KEEPS_BOOLEAN_VALUE:
        return None  # KubeRay passes nothing
    if kind is None:
        return f"ray start has no option --{key}"
    if lower == "true" and key not in KEEPS_BOOLEAN_VALUE:
        if kind == "flag":
            return None  # the switch, or nothing
        return f"KubeRay passes a true value as the bare switch --{key}, but it needs a value (Ray then reads the next option as it)"
    if kind == "flag":
        return f"--{key} is a switch: ray start takes no value for it (write true or false)"
    try:
        words = shlex.split(value)
    except ValueError:
        return f"{value!r}: the shell cannot read it (an unbalanced quote); the start command runs through bash"
    if not words:
        words = [""]  # `--key=`: an empty value
    if len(words) != 1:
        return f"{value!r}: the shell splits it into {len(words)} words; the start command runs through bash"
    return _value_problem(kind, words[0])


# Ray's floor for the object store (ray/_private/ray_constants.py OBJECT_STORE_MINIMUM_MEMORY_BYTES,
# enforced by ray/_private/services.py when the raylet starts): 75 MiB.
OBJECT_STORE_MINIMUM_BYTES = 75 * 1024 * 1024
