"""Shared fixtures: the pinned Helm binaries, rendering with caching, generated values files."""

from __future__ import annotations

import copy
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from generator.helm import runner as helm_mod  # noqa: E402
from generator.render.manifests import parse_documents  # noqa: E402
from generator.values.build import Options, build  # noqa: E402

CHART = ROOT / "charts" / "nemo-rl-gke"
CI_DIR = CHART / "ci"


def load_chart_program(name: str) -> Any:
    """Import one of the chart's programs (files/<name>.py) as a module."""
    from generator.render.chart_programs import load

    return load(name)


def pytest_report_header(config: pytest.Config) -> list[str]:
    lines = []
    for pin in helm_mod.PINS:
        lines.append(f"helm {pin.version}: {'installed' if pin.path.exists() else 'MISSING (run scripts/bootstrap.sh)'}")
    return lines


@pytest.fixture(scope="session")
def helms() -> list[helm_mod.Helm]:
    """Both pinned Helm majors; missing binaries fail the run (never a silent skip)."""
    return helm_mod.all_pinned()


@pytest.fixture(scope="session", params=[p.version for p in helm_mod.PINS])
def helm_major(request: pytest.FixtureRequest) -> helm_mod.Helm:
    """Each pinned Helm major, for what the majors do differently: the values schema (Helm 3.17
    reads draft-07, Helm 4 JSON Schema 2020-12), lint, package and install."""
    pin = next(p for p in helm_mod.PINS if p.version == request.param)
    return helm_mod.pinned(pin)


@pytest.fixture(scope="session")
def helm() -> helm_mod.Helm:
    """The pinned Helm 4, for tests of what the templates render: both majors run the same
    template engine, so rendering is tested once (helm_major covers where they differ)."""
    return helm_mod.pinned(helm_mod.PINS[0])


_cache: dict[tuple[Any, ...], str] = {}


def render_text(
    helm: helm_mod.Helm,
    values: Sequence[dict[str, Any] | Path] = (),
    *,
    release: str = "nemo-rl",
    namespace: str = "default",
    set_values: Sequence[str] = (),
    tmp_dir: Path | None = None,
) -> str:
    files: list[Path] = []
    key_parts: list[str] = []
    base = tmp_dir or Path(f"/tmp/nemo-rl-gke-tests-{os.getpid()}")
    base.mkdir(parents=True, exist_ok=True)
    for v in values:
        if isinstance(v, Path):
            files.append(v)
            key_parts.append(v.read_text())
        else:
            text = json.dumps(v, sort_keys=True)
            path = base / f"values-{abs(hash(text))}.yaml"
            path.write_text(yaml.safe_dump(v, sort_keys=False))
            files.append(path)
            key_parts.append(text)
    key = (helm.version, release, namespace, tuple(key_parts), tuple(set_values))
    if key not in _cache:
        _cache[key] = helm.template(files, release=release, namespace=namespace, set_values=set_values)
    return _cache[key]


def render(helm: helm_mod.Helm, values: Sequence[dict[str, Any] | Path] = (), **kw: Any) -> list[dict[str, Any]]:
    return parse_documents(render_text(helm, values, **kw))


@pytest.fixture(scope="session")
def render_fn() -> Callable[..., list[dict[str, Any]]]:
    return render


def machine_options(gpu: str) -> dict[str, Any]:
    """What the generator needs for this machine beyond --gpu: a reservation's name where the
    profile row offers reservations only (A4X), the one the repository's files name."""
    from generator.gke.profiles import PROFILES
    from generator.gke.provisioning import example_reservation

    p = PROFILES[gpu]
    return {} if p.offers("spot") else {"reservation": example_reservation(p)}


def values_for(gpu: str = "h200", **opts: Any) -> dict[str, Any]:
    return build(Options(gpu=gpu, **(machine_options(gpu) | opts)))


def with_changes(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of `base` with dotted-path changes, e.g. {'network.mode': 'tcp'}."""
    out = copy.deepcopy(base)
    for dotted, value in changes.items():
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return out


def kinds(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o.get("kind") == kind]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = kinds(objs, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def ray_pod_specs(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(label, pod template) of the Ray head and every worker group."""
    return [(n, t) for n, t in pod_specs(objs) if n == "head" or n.startswith("worker:")]


def pod_specs(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(label, pod template) of every pod the objects would create."""
    out = []
    for o in objs:
        if o["kind"] == "RayCluster":
            out.append(("head", o["spec"]["headGroupSpec"]["template"]))
            out += [(f"worker:{g['groupName']}", g["template"]) for g in o["spec"]["workerGroupSpecs"]]
        elif o["kind"] == "Job":
            out.append((f"job:{o['metadata']['name']}", o["spec"]["template"]))
        elif o["kind"] == "Pod":
            out.append((f"pod:{o['metadata']['name']}", {"metadata": o["metadata"], "spec": o["spec"]}))
    return out


# --- a real local Ray head, one per test module that asks for it ---------------------------


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    import ray_head

    h = ray_head.start(tmp_path_factory.mktemp("ray-head"))
    yield h
    ray_head.stop(h)
    assert h.pids() == [], "Ray processes of the test head survived its teardown"


@pytest.fixture
def client(head):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(head.address)


@pytest.fixture(scope="module")
def tmp_values(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for a test module's values files."""
    return tmp_path_factory.mktemp("values")


# --- the cluster lane: the real test bed (testbed/), one per session ----------------------------

CLUSTER_LANE = ROOT / "tests" / "cluster"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/cluster/ runs against the test bed: marked `cluster`, so that
    `scripts/test.sh` runs them in their own lane, in one process (a pytest-xdist worker would
    start a test bed of its own)."""
    for item in items:
        if CLUSTER_LANE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def bed(tmp_path_factory: pytest.TempPathFactory):
    """The test bed, built where needed and started once; every process stopped at the end, also
    after a failure or Ctrl-C (and the kernel kills them should this process die outright)."""
    from testbed import bed as testbed
    from testbed.processes import Supervisor, _alive

    state = tmp_path_factory.mktemp("testbed")
    t = testbed.up(state, log=lambda line: print(f"[testbed] {line}", flush=True))
    print(f"[testbed] started in {sum(v for k, v in t.timings.items() if k != 'build'):.1f} s: {t.timings}", flush=True)
    records = Supervisor(state).records()
    try:
        yield t
    finally:
        testbed.down(state)
        left = [r.name for r in records if _alive(r)]
        assert not left, f"test bed processes survived its teardown: {left}"


@pytest.fixture(scope="session", params=["v1.3.2", "v1.6.2"], ids=lambda v: f"kuberay-{v}")
def kuberay(request: pytest.FixtureRequest) -> str:
    """Each KubeRay version the test bed runs, for the tests that depend on the operator."""
    return request.param
