"""`helm test` (launcher.py --check): the Ray cluster compared with what the values asked for:
nodes, GPUs, the Ray version, and each GPU worker's network interfaces (a probe job on every GPU
node)."""

from __future__ import annotations

import json
import shlex
import time

from launcher_log import wait_until
from launcher_policy import TERMINAL
from launcher_ray import Runs, alive_nodes, head_healthy, retry, version_mismatch
from launcher_spec import Spec

INTERFACES_TAG = "NEMO_RL_GKE_INTERFACES "


_PROBE = """
import json, os, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init()
@ray.remote(num_cpus=0)
def nics():
    return sorted(os.listdir('/sys/class/net'))
out = {}
for n in ray.nodes():
    if n['Alive'] and n['Resources'].get('GPU', 0) > 0:
        ref = nics.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n['NodeID'], soft=False)).remote()
        out[n['NodeManagerAddress'] + '/' + n['NodeID'][:8]] = ray.get(ref, timeout=120)
print('TAG' + json.dumps(out))
""".replace("TAG", INTERFACES_TAG)


def check(spec: Spec) -> int:
    """Compare what the Ray head reports with what the values asked for."""
    wait_until(
        f"the Ray head at {spec.address}",
        spec.timeout("head_s", 600),
        spec.poll_interval_s,
        lambda: head_healthy(spec.address),
        "is the head pod Running? kubectl get pods -l ray.io/node-type=head",
    )
    nodes = retry(lambda: alive_nodes(spec.address), spec)
    gpus = sum(float(n["resources"].get("GPU", 0)) for n in nodes)
    problems = [why] if (why := version_mismatch(spec)) else []
    if spec.expected_nodes and len(nodes) != spec.expected_nodes:
        problems.append(f"{len(nodes)} Ray nodes alive, expected {spec.expected_nodes} (head + GPU workers)")
    if gpus != spec.expected_gpus:
        problems.append(f"{gpus:g} GPUs in the cluster, expected {spec.expected_gpus}")
    print(f"nodes: {len(nodes)}, GPUs: {gpus:g}", flush=True)
    if spec.expected_interfaces:
        runs = Runs(spec)
        job_id = f"{spec.submission_id[:60]}-check-{int(time.time())}"
        runs.call(lambda: runs.client.submit_job(entrypoint=f"python -c {shlex.quote(_PROBE)}", submission_id=job_id))
        status = wait_until(
            "the interface probe", 600, spec.poll_interval_s, lambda: s if (s := runs.status(job_id)) in TERMINAL else None, ""
        )
        logs = runs.call(lambda: runs.client.get_job_logs(job_id))
        line = next((ln for ln in logs.splitlines() if ln.startswith(INTERFACES_TAG)), None)
        if status != "SUCCEEDED" or line is None:
            problems.append(f"interface probe {job_id} ended {status}: {logs.strip()[-500:]}")
        else:
            per_node = json.loads(line[len(INTERFACES_TAG) :])
            if not per_node:
                problems.append("no GPU worker answered the interface probe")
            for node, names in sorted(per_node.items()):
                missing = [i for i in spec.expected_interfaces if i not in names]
                print(f"{node}: {' '.join(names)}", flush=True)
                if missing:
                    problems.append(f"GPU worker {node} lacks {', '.join(missing)} (RDMA NICs not attached?)")
    for p in problems:
        print(f"FAIL: {p}", flush=True)
    if not problems:
        print("ok: the Ray cluster matches the values", flush=True)
    return 1 if problems else 0
