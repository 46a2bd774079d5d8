"""How `status` prints a release's state: text for people, or one JSON document.

The JSON document (keys stable, docs/doctor-and-status.md): `release`, `namespace`, `server`,
`context`, `found`, `raycluster` ({`name`, `state`, `detail`, `suspended`, `workers_desired`,
`workers_ready`} or null), `pods` ([{`group`, `name`, `phase`, `ready`, `node`, `reason`}]), `jobs`
([{`component`, `name`, `state`, `detail`}]), `events`, `ray_job` ({`submission_id`, `attempt`,
`status`, `message`, `start_time`, `end_time`} or null), `progress` ({`step`, `max_steps`,
`latest`, `first_reward`, `first_reward_step`, `mean_step_time_s`, `time_left_s`, `line`} or null),
`problems` and `unread` (the collections that could not be read, e.g. `rayclusters`; with `found`
false, the release may exist all the same).
"""

from __future__ import annotations

import json
import time

from generator.cluster.state import ReleaseState


def _clock(ms: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else "?"


def lines(state: ReleaseState) -> list[str]:
    out = []
    rc = state.raycluster
    if rc is None and "rayclusters" in state.unread:
        out.append(f"RayCluster: could not read the RayClusters of namespace {state.namespace} (see the note below)")
    elif rc is None:
        out.append(f"RayCluster: none with {state.release}'s labels in namespace {state.namespace}")
    else:
        workers = (
            "no Ray pod runs (the launcher suspends it once the run has ended; Kueue, until it admits it)"
            if rc["suspended"]
            else f"{rc['workers_ready']}/{rc['workers_desired']} GPU workers ready"
        )
        detail = f" ({rc['detail']})" if rc.get("detail") else ""
        out.append(f"RayCluster {rc['name']}: {rc['state']}{detail}, {workers}")
    width = max((len(p.group) for p in state.pods), default=4)
    for p in state.pods:
        mark = "ready" if p.ready else p.phase
        where = f" on {p.node}" if p.node else ""
        out.append(f"  {p.group:<{width}}  {p.name}  {mark}{where}" + (f"  ({p.reason})" if p.reason else ""))
    out += [f"  warning event {e}" for e in state.events]
    for j in state.jobs:
        out.append(f"Job {j.component} {j.name}: {j.state}" + (f" ({j.detail})" if j.detail else ""))
    if state.ray_job is not None:
        r = state.ray_job
        since = f"started {_clock(r.start_time)}" + (f", ended {_clock(r.end_time)}" if r.end_time else "")
        out.append(f"Ray job {r.submission_id} (attempt {r.attempt}): {r.status}, {since}" + (f": {r.message}" if r.message else ""))
    if state.progress is not None:
        p = state.progress
        first = f"; first reward {p['first_reward']:.4f} at step {p['first_reward_step']}" if p.get("first_reward") is not None else ""
        out.append(f"Progress: {p['line']}{first}")
    out += [f"note: {x}" for x in state.problems]
    return out


def as_json(state: ReleaseState, server: str, context: str) -> str:
    doc = {"release": state.release, "namespace": state.namespace, "server": server, "context": context, "found": state.found}
    doc |= {k: v for k, v in state.as_dict().items() if k not in doc}
    return json.dumps(doc, indent=2)
