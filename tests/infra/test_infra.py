"""`python -m generator infra`: golden scripts, shellcheck, and real runs of the generated scripts
under bash against the stand-in `gcloud`/`kubectl` of tests/infra/fake_cli (see fake_cloud.py).

Set UPDATE_GOLDEN=1 to rewrite tests/infra/golden/*.sh after a reviewed change.
"""

from __future__ import annotations

import ast
import importlib.util
import marshal
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from generator import cli
from generator.gke.profiles import profile
from generator.render.manifests import parse_documents
from generator.values.build import Options, build

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "infra" / "golden"
FAKE_CLI = ROOT / "tests" / "infra" / "fake_cli"
BASH = shutil.which("bash") or "/bin/bash"
BASE = ["--project", "my-project", "--region", "us-central1", "--zone", "us-central1-b"]

_spec = importlib.util.spec_from_file_location("fake_cloud", FAKE_CLI / "fake_cloud.py")
assert _spec and _spec.loader
fake_cloud = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_cloud)

RESERVATION = "projects/my-project/reservations/r1/reservationBlocks/b1"
GOLDEN_CASES = {
    "b200-standard": ["--gpu", "b200"],
    "h200-standard": ["--gpu", "h200"],
    "b200-autopilot": ["--gpu", "b200", "--mode", "autopilot"],
    "h200-autopilot": ["--gpu", "h200", "--mode", "autopilot"],
    "h200-standard-teardown": ["--gpu", "h200", "--teardown"],
    # the GPU pool's sizing per provisioning type (h200-standard above is Spot)
    "h200-standard-on-demand": ["--gpu", "h200", "--provisioning", "on-demand"],
    "b200-standard-flex-start": ["--gpu", "b200", "--provisioning", "flex-start", "--nodes", "4"],
    "h200-standard-reservation": ["--gpu", "h200", "--provisioning", "reservation", "--reservation", "r1"],
}
VARIANTS = {
    **GOLDEN_CASES,
    "reservation-preload": [
        *("--gpu", "b200", "--provisioning", "reservation", "--reservation", RESERVATION),
        *("--preload-image-disk", "nemo-rl-v050-cache", "--network-prefix", "team1", "--cluster", "grpo"),
    ],
    "dry-run-default": ["--gpu", "h200", "--dry-run", "--namespace", "rl", "--ksa", "trainer"],
    "autopilot-teardown": ["--gpu", "b200", "--mode", "autopilot", "--teardown", "--bucket", "my-bucket"],
}


def generate(args: list[str], out: Path) -> Path:
    """The script text via the real CLI entry point (in-process), written to `out`."""
    rc = cli.main(["infra", *BASE, *args, "-o", str(out), "--force"])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("scripts")
    return {name: generate(args, d / f"{name}.sh") for name, args in VARIANTS.items()}


# --- golden files and shellcheck --------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_script_matches_golden_file(scripts, name):
    text = scripts[name].read_text()
    golden = GOLDEN / f"{name}.sh"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"{golden} is missing: run UPDATE_GOLDEN=1 pytest tests/infra/test_infra.py"
    assert text == golden.read_text(), f"{golden.name} differs from the generator output; review, then UPDATE_GOLDEN=1"


def test_shellcheck_is_installed():
    assert shutil.which("shellcheck"), "shellcheck is missing: run scripts/bootstrap.sh (installs Debian's shellcheck)"


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_shellcheck_passes(scripts, name):
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: run scripts/bootstrap.sh (installs Debian's shellcheck)"
    proc = subprocess.run([shellcheck, "--severity=style", str(scripts[name])], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_script_header_settings_and_strict_mode(scripts):
    text = scripts["reservation-preload"].read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "\nset -euo pipefail\n" in text
    assert "# Written by: python -m generator infra --gpu b200 --project my-project" in text
    assert f"--provisioning reservation --reservation {RESERVATION}" in text
    assert "PRELOAD_IMAGE='projects/my-project/global/images/nemo-rl-v050-cache'\n" in text
    assert '--secondary-boot-disk="disk-image=$PRELOAD_IMAGE,mode=CONTAINER_IMAGE_CACHE"' in text
    assert "--enable-image-streaming" in text
    assert "--reservation-affinity=specific" in text and '--reservation="$RESERVATION"' in text
    flex = scripts["b200-standard-flex-start"].read_text()
    for f in ("--flex-start", "--enable-autoscaling", "--num-nodes=0", '--total-max-nodes="$NODES"', "--location-policy=ANY"):
        assert f in flex
    assert "--spot" not in flex and "--spot" not in scripts["h200-standard-on-demand"].read_text()


# --- the stand-in cloud ----------------------------------------------------------------------


@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    calls: list[dict[str, Any]]

    @property
    def mutations(self) -> list[str]:
        """Signatures of the mutating calls, failed ones included, in order."""
        return [signature(c) for c in self.calls if c["mutating"]]

    def call(self, sig: str) -> dict[str, str]:
        """The flags of the one successful call with this signature."""
        found = [c for c in self.calls if signature(c) == sig and c["rc"] == 0]
        assert len(found) == 1, (sig, [signature(c) for c in self.calls])
        return flags(found[0])


def signature(call: dict[str, Any]) -> str:
    words, _ = fake_cloud.parse(call["argv"])
    return " ".join([call["tool"], *words])


def flags(call: dict[str, Any]) -> dict[str, str]:
    _, fl = fake_cloud.parse(call["argv"])
    return dict(fl)


def all_flags(call: dict[str, Any], key: str) -> list[str]:
    _, fl = fake_cloud.parse(call["argv"])
    return [v for k, v in fl if k == key]


class FakeCloud:
    """One fake project: state persists across runs; every run gets its own call log."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state.json"
        self.runs = 0
        assert os.access(FAKE_CLI / "gcloud", os.X_OK) and os.access(FAKE_CLI / "kubectl", os.X_OK), "fake_cli/* must be executable"

    def run(self, script: Path, *args: str, fail_at: int = 0, stdin: str = "", env: dict[str, str] | None = None) -> Run:
        self.runs += 1
        log = self.root / f"calls-{self.runs}.jsonl"
        full_env = {k: v for k, v in os.environ.items() if k not in ("GKE_VERSION", "FAKE_FAIL_AT", "FAKE_GKE_VERSION")}
        full_env.update(
            PATH=f"{FAKE_CLI}{os.pathsep}{os.environ.get('PATH', '')}",
            FAKE_PYTHON=sys.executable,
            FAKE_STATE=str(self.state),
            FAKE_LOG=str(log),
            FAKE_FAIL_AT=str(fail_at or ""),
        )
        full_env.update(env or {})
        proc = subprocess.run(
            [BASH, str(script), *args], input=stdin, capture_output=True, text=True, env=full_env, cwd=self.root, check=False, timeout=120
        )
        calls = [ast.literal_eval(line) for line in log.read_text().splitlines()] if log.exists() else []
        return Run(proc.returncode, proc.stdout, proc.stderr, calls)

    def resources(self) -> set[str]:
        if not self.state.exists():
            return set()
        return set(marshal.loads(self.state.read_bytes())["resources"])  # noqa: S302 - the fake's own state file

    def seed(self, resources: dict[str, dict[str, Any]]) -> None:
        self.state.write_bytes(marshal.dumps({"resources": {"compute/networks/default": {}, **resources}}))


@pytest.fixture
def cloud(tmp_path: Path) -> FakeCloud:
    return FakeCloud(tmp_path)


def expected_creates(gpu: str, mode: str, prefix: str = "nemo-rl", cluster: str = "nemo-rl") -> list[str]:
    apis = "compute.googleapis.com container.googleapis.com storage.googleapis.com servicenetworking.googleapis.com lustre.googleapis.com"
    creates = [
        f"gcloud services enable {apis}",
        f"gcloud compute networks create {prefix}-gvnic-net",
        f"gcloud compute networks subnets create {prefix}-gvnic-sub",
        f"gcloud compute firewall-rules create {prefix}-gvnic-internal",
        f"gcloud compute networks create {prefix}-rdma-net",
        *(f"gcloud compute networks subnets create {prefix}-rdma-sub-{i}" for i in range(8)),
    ]
    if mode == "standard":
        creates += [f"gcloud container clusters create {cluster}", f"gcloud container node-pools create gpu-{gpu}"]
    else:
        creates += [f"gcloud container clusters create-auto {cluster}"]
    return [
        *creates,
        "kubectl apply",
        f"gcloud storage buckets create gs://my-project-{cluster}",
        "kubectl create serviceaccount nemo-rl-ksa",
        f"gcloud storage buckets add-iam-policy-binding gs://my-project-{cluster}",
        f"gcloud compute addresses create {cluster}-lustre-psa",
        f"gcloud compute firewall-rules create {cluster}-lustre",
        "gcloud services vpc-peerings connect",
        f"gcloud lustre instances create {cluster}-lustre",
    ]


# --- bring-up runs -----------------------------------------------------------------------------


@pytest.mark.parametrize(("gpu", "mode"), [("b200", "standard"), ("h200", "standard"), ("b200", "autopilot"), ("h200", "autopilot")])
def test_first_run_creates_everything_in_order_and_second_run_nothing(scripts, cloud, gpu, mode):
    first = cloud.run(scripts[f"{gpu}-{mode}"])
    assert first.rc == 0, first.stderr
    assert first.mutations == expected_creates(gpu, mode)
    assert all(c["rc"] == 0 for c in first.calls if c["mutating"])

    p = profile(gpu)
    cluster_verb = "create" if mode == "standard" else "create-auto"
    c = first.call(f"gcloud container clusters {cluster_verb} nemo-rl")
    assert c["location"] == "us-central1"
    assert c["cluster-version"] == "1.33.5-gke.1080000"  # the fake's default version, >= the profile minimum
    assert "enable-multi-networking" in c and "enable-legacy-lustre-port" in c
    if mode == "standard":
        assert c["addons"] == "RayOperator,LustreCsiDriver"
        assert "enable-dataplane-v2" in c and "enable-ip-alias" in c
        assert c["workload-pool"] == "my-project.svc.id.goog"
        pool_call = next(x for x in first.calls if signature(x) == f"gcloud container node-pools create gpu-{gpu}")
        pool = flags(pool_call)
        assert pool["machine-type"] == p.machine_type
        assert pool["accelerator"] == f"type={p.node_label},count={p.gpus_per_node},gpu-driver-version=latest"
        assert pool["node-locations"] == "us-central1-b"
        assert "spot" in pool and pool["num-nodes"] == "0" and pool["total-max-nodes"] == "2"  # Spot, from zero
        assert len(all_flags(pool_call, "additional-node-network")) == 1 + p.rdma_nics
    else:
        assert "enable-ray-operator" in c and "enable-lustre-csi-driver" in c
        assert not any("node-pools" in signature(x) for x in first.calls)
    rdma = first.call("gcloud compute networks create nemo-rl-rdma-net")
    assert rdma["network-profile"] == "us-central1-b-vpc-roce"
    installer = next(x for x in first.calls if signature(x) == "kubectl apply")
    manifest = flags(installer)["-f"]
    assert manifest.endswith(
        "/gpudirect-rdma/nccl-rdma-installer-autopilot.yaml" if mode == "autopilot" else "/gpudirect-rdma/nccl-rdma-installer.yaml"
    )
    lustre = first.call("gcloud lustre instances create nemo-rl-lustre")
    assert lustre["location"] == "us-central1-b"
    assert lustre["network"] == "projects/my-project/global/networks/default"
    assert "gke-support-enabled" in lustre
    assert (lustre["capacity-gib"], lustre["per-unit-storage-throughput"], lustre["filesystem"]) == ("9000", "1000", "lfs")
    binding = first.call("gcloud storage buckets add-iam-policy-binding gs://my-project-nemo-rl")
    assert binding["member"] == (
        "principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/"
        "my-project.svc.id.goog/subject/ns/default/sa/nemo-rl-ksa"
    )
    for line in (
        "volumeHandle: my-project/us-central1-b/nemo-rl-lustre",
        "ip:           10.90.0.5",
        "filesystem:   lfs",
        "--set storage.lustre.volumeHandle=my-project/us-central1-b/nemo-rl-lustre",
        "--set storage.lustre.ip=10.90.0.5",
        "--set storage.lustre.filesystem=lfs",
        "--set serviceAccount.name=nemo-rl-ksa",
        f"-f values-{gpu}.yaml",
    ):
        assert line in first.stdout
    assert ("--mode autopilot" in first.stdout) == (mode == "autopilot")

    second = cloud.run(scripts[f"{gpu}-{mode}"])
    assert second.rc == 0, second.stderr
    assert second.mutations == []
    assert "ip:           10.90.0.5" in second.stdout
    assert "Bring-up complete." in second.stdout


# --- how the GPU pool is sized, per provisioning type ---------------------------------------

AUTOSCALED_FROM_ZERO = {"enable-autoscaling": "", "num-nodes": "0", "total-min-nodes": "0", "location-policy": "ANY"}
POOL_SIZING_CASES = {
    # variant: (pool, --nodes, flags the pool must have beyond AUTOSCALED_FROM_ZERO or the fixed size)
    "h200-standard": ("gpu-h200", "2", {"spot": ""}),
    "h200-standard-on-demand": ("gpu-h200", "2", {}),
    "b200-standard-flex-start": ("gpu-b200", "4", {"flex-start": "", "reservation-affinity": "none", "no-enable-autorepair": ""}),
    "reservation-preload": ("gpu-b200", "2", {"reservation-affinity": "specific", "reservation": RESERVATION}),
    "h200-standard-reservation": ("gpu-h200", "2", {"reservation-affinity": "specific", "reservation": "r1"}),
}


def _pool_call(run: Run, pool: str) -> dict[str, str]:
    assert run.rc == 0, run.stderr
    return run.call(f"gcloud container node-pools create {pool}")


@pytest.mark.parametrize("variant", ["h200-standard", "h200-standard-on-demand", "b200-standard-flex-start"])
def test_spot_on_demand_and_flex_start_pools_autoscale_from_zero_to_nodes(scripts, cloud, variant):
    pool_name, nodes, extra = POOL_SIZING_CASES[variant]
    pool = _pool_call(cloud.run(scripts[variant]), pool_name)
    assert pool.items() >= {**AUTOSCALED_FROM_ZERO, "total-max-nodes": nodes, **extra}.items()
    # one kind of bound only (GKE: the total and the per-zone pairs are mutually exclusive)
    assert "min-nodes" not in pool and "max-nodes" not in pool
    assert ("spot" in pool) == (variant == "h200-standard")
    assert "reservation" not in pool
    text = scripts[variant].read_text()
    assert "# Autoscaled from 0 to $NODES nodes" in text
    assert "https://docs.cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler" in text


@pytest.mark.parametrize("variant", ["reservation-preload", "h200-standard-reservation"])
def test_reservation_pool_is_fixed_at_nodes_and_the_script_says_why(scripts, cloud, variant):
    pool_name, nodes, extra = POOL_SIZING_CASES[variant]
    pool = _pool_call(cloud.run(scripts[variant]), pool_name)
    assert pool.items() >= {"num-nodes": nodes, **extra}.items()
    assert not {"enable-autoscaling", "total-min-nodes", "total-max-nodes", "min-nodes", "max-nodes", "location-policy"} & pool.keys()
    text = scripts[variant].read_text()
    assert "# Fixed at $NODES nodes, not autoscaled: a reservation is billed" in text
    assert "https://docs.cloud.google.com/compute/docs/instances/reservations-overview#reservation-billing" in text
    assert "# Autoscaled from 0" not in text


def test_autopilot_scripts_create_no_node_pool_and_set_no_autoscaling(scripts):
    for name in ("b200-autopilot", "h200-autopilot"):
        text = scripts[name].read_text()
        assert "node-pools create" not in text and "--enable-autoscaling" not in text and "autoscaling-profile" not in text


def test_no_script_sets_an_autoscaling_profile(scripts):
    # GKE's default (balanced) profile is kept: docs/install-on-gke.md says why.
    assert not any("autoscaling-profile" in scripts[name].read_text() for name in VARIANTS)


# --- the stand-in's node-pool sizing rules -----------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"location-policy": "ANY", "num-nodes": "2"}, "location policy ANY needs"),
        ({"min-nodes": "0"}, "mutually exclusive"),
        ({"total-min-nodes": "3", "total-max-nodes": "2"}, "total node bounds"),
    ],
)
def test_the_stand_in_refuses_pools_that_break_the_documented_sizing_rules(cloud, tmp_path, change, message):
    """The fake enforces what the GKE pages say, so the flags above are checked, not only recorded."""
    cloud.seed({"container/clusters/nemo-rl": {}})
    argv = ["container", "node-pools", "create", "gpu-h200", "--cluster=nemo-rl", "--enable-autoscaling", "--num-nodes=0"]
    argv += ["--total-min-nodes=0", "--total-max-nodes=2", "--location-policy=ANY"]
    merged = dict(fake_cloud.parse(argv)[1])
    merged.update(change)
    args = argv[:4] + [f"--{k}={v}" if v else f"--{k}" for k, v in merged.items()]
    env = {**os.environ, "FAKE_PYTHON": sys.executable, "FAKE_STATE": str(cloud.state), "FAKE_LOG": str(tmp_path / "log")}
    proc = subprocess.run([str(FAKE_CLI / "gcloud"), *args], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and message in proc.stderr
    ok = subprocess.run([str(FAKE_CLI / "gcloud"), *argv], env=env, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr


H200_STANDARD_CREATES = expected_creates("h200", "standard")
# The first create of every step, and a few in the middle of a step.
FAIL_AT = [
    "gcloud services enable",
    "gcloud compute networks create nemo-rl-gvnic-net",
    "gcloud compute firewall-rules create nemo-rl-gvnic-internal",
    "gcloud compute networks create nemo-rl-rdma-net",
    "gcloud compute networks subnets create nemo-rl-rdma-sub-4",
    "gcloud container clusters create nemo-rl",
    "gcloud container node-pools create gpu-h200",
    "kubectl apply",
    "gcloud storage buckets create",
    "kubectl create serviceaccount",
    "gcloud storage buckets add-iam-policy-binding",
    "gcloud compute addresses create",
    "gcloud services vpc-peerings connect",
    "gcloud lustre instances create",
]


@pytest.mark.parametrize("k", [next(i for i, c in enumerate(H200_STANDARD_CREATES, 1) if c.startswith(s)) for s in FAIL_AT])
def test_failure_at_step_k_stops_there_and_rerun_completes_from_k(scripts, cloud, k):
    creates = H200_STANDARD_CREATES
    failed = cloud.run(scripts["h200-standard"], fail_at=k)
    assert failed.rc != 0
    assert failed.mutations == creates[:k]
    assert [c["rc"] for c in failed.calls if c["mutating"]][-1] == 1
    assert failed.calls[-1]["mutating"], "nothing may run after the failed create"
    assert "error: stopped in step" in failed.stderr and "run this script again" in failed.stderr

    rerun = cloud.run(scripts["h200-standard"])
    assert rerun.rc == 0, rerun.stderr
    assert rerun.mutations == creates[k - 1 :]


@pytest.mark.parametrize("k", [1, 14, 22])
def test_autopilot_failure_and_rerun(scripts, cloud, k):
    creates = expected_creates("b200", "autopilot")
    failed = cloud.run(scripts["b200-autopilot"], fail_at=k)
    assert failed.rc != 0 and failed.mutations == creates[:k]
    rerun = cloud.run(scripts["b200-autopilot"])
    assert rerun.rc == 0, rerun.stderr
    assert rerun.mutations == creates[k - 1 :]


def test_gke_version_below_the_profile_minimum_stops_before_the_cluster(scripts, cloud):
    run = cloud.run(scripts["b200-standard"], env={"FAKE_GKE_VERSION": "1.32.1-gke.100"})
    assert run.rc == 1
    assert "older than 1.32.4-gke.1236000" in run.stderr
    assert not any("clusters create" in m for m in run.mutations)
    pinned = cloud.run(scripts["b200-standard"], env={"GKE_VERSION": "1.34.1-gke.2000"})
    assert pinned.rc == 0, pinned.stderr
    assert pinned.call("gcloud container clusters create nemo-rl")["cluster-version"] == "1.34.1-gke.2000"


def test_existing_private_services_connection_is_extended_not_replaced(scripts, cloud):
    cloud.seed(
        {
            "compute/addresses/sql-range": {"network": "default"},
            "peering/default": {"network": "default", "ranges": ["sql-range"]},
        }
    )
    run = cloud.run(scripts["h200-standard"])
    assert run.rc == 0, run.stderr
    assert "gcloud services vpc-peerings connect" not in run.mutations
    assert run.call("gcloud services vpc-peerings update")["ranges"] == "sql-range,nemo-rl-lustre-psa"


def test_dry_run_prints_every_command_and_calls_nothing(scripts, cloud):
    run = cloud.run(scripts["h200-standard"], "--dry-run")
    assert run.rc == 0, run.stderr
    assert run.calls == []
    for needle in (
        "+ gcloud compute networks create nemo-rl-rdma-net --project=my-project --subnet-mode=custom"
        " --network-profile=us-central1-b-vpc-roce",
        "+ gcloud container clusters create nemo-rl",
        "+ gcloud container node-pools create gpu-h200",
        "+ kubectl apply -f https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/",
        "+ gcloud lustre instances create nemo-rl-lustre",
        "? check: gcloud compute networks describe nemo-rl-gvnic-net",
        "Dry run: nothing was changed.",
    ):
        assert needle in run.stdout


def test_generator_dry_run_flag_makes_dry_run_the_script_default(scripts, cloud):
    run = cloud.run(scripts["dry-run-default"])
    assert run.rc == 0 and run.calls == [] and "Dry run: nothing was changed." in run.stdout
    executed = cloud.run(scripts["dry-run-default"], "--execute")
    assert executed.rc == 0, executed.stderr
    assert "kubectl create namespace rl" in executed.mutations
    assert "kubectl create serviceaccount trainer" in executed.mutations


def test_missing_tools_and_unknown_arguments(scripts, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([BASH, str(scripts["h200-standard"])], env={"PATH": str(empty)}, capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "gcloud is not on PATH" in proc.stderr
    proc = subprocess.run([BASH, str(scripts["h200-standard"]), "--frobnicate"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "unknown argument --frobnicate" in proc.stderr
    proc = subprocess.run([BASH, str(scripts["h200-standard"]), "--help"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "--dry-run" in proc.stdout


# --- teardown ----------------------------------------------------------------------------------

EXPECTED_DELETES = [
    "gcloud lustre instances delete nemo-rl-lustre",
    "gcloud services vpc-peerings delete",
    "gcloud compute firewall-rules delete nemo-rl-lustre",
    "gcloud compute addresses delete nemo-rl-lustre-psa",
    "gcloud storage rm gs://my-project-nemo-rl",
    "gcloud container clusters delete nemo-rl",
    *(f"gcloud compute networks subnets delete nemo-rl-rdma-sub-{i}" for i in reversed(range(8))),
    "gcloud compute networks delete nemo-rl-rdma-net",
    "gcloud compute firewall-rules delete nemo-rl-gvnic-internal",
    "gcloud compute networks subnets delete nemo-rl-gvnic-sub",
    "gcloud compute networks delete nemo-rl-gvnic-net",
]


def test_teardown_asks_first_then_deletes_in_reverse_order(scripts, cloud):
    up = cloud.run(scripts["h200-standard"])
    assert up.rc == 0, up.stderr
    before = cloud.resources()

    refused = cloud.run(scripts["h200-standard-teardown"], stdin="n\n")
    assert refused.rc == 1
    assert "aborted: nothing was deleted" in refused.stderr
    assert "Managed Lustre instance nemo-rl-lustre in us-central1-b" in refused.stdout
    assert refused.mutations == []
    assert cloud.resources() == before

    down = cloud.run(scripts["h200-standard-teardown"], "--yes")
    assert down.rc == 0, down.stderr
    assert down.mutations == EXPECTED_DELETES
    assert all(c["rc"] == 0 for c in down.calls if c["mutating"])
    # the reverse order of creation, for every resource that is deleted on its own
    created = [m.replace(" create ", " ").replace("gs://", "") for m in up.mutations]
    deleted = [d.replace(" delete ", " ").replace("storage rm", "storage buckets").replace("gs://", "") for d in down.mutations]
    own = [d for d in deleted if d in created]
    assert own == [c for c in reversed(created) if c in own]
    assert cloud.resources() == {"compute/networks/default"} | {r for r in before if r.startswith("api/")}

    again = cloud.run(scripts["h200-standard-teardown"], "--yes")
    assert again.rc == 0 and again.mutations == []


def test_teardown_accepts_yes_on_stdin_and_keeps_a_shared_peering(scripts, cloud):
    cloud.seed(
        {
            "compute/addresses/sql-range": {"network": "default"},
            "peering/default": {"network": "default", "ranges": ["sql-range"]},
        }
    )
    assert cloud.run(scripts["h200-standard"]).rc == 0
    down = cloud.run(scripts["h200-standard-teardown"], stdin="yes\n")
    assert down.rc == 0, down.stderr
    assert "gcloud services vpc-peerings delete" not in down.mutations
    assert "gcloud compute addresses delete nemo-rl-lustre-psa" not in down.mutations
    assert "also serves other ranges" in down.stdout
    assert "gcloud container clusters delete nemo-rl" in down.mutations


def test_teardown_dry_run_lists_every_delete(scripts, cloud):
    run = cloud.run(scripts["autopilot-teardown"], "--dry-run")
    assert run.rc == 0 and run.calls == []
    assert "+ gcloud storage rm --recursive gs://my-bucket" in run.stdout
    assert "+ gcloud container clusters delete nemo-rl --project=my-project --location=us-central1 --quiet" in run.stdout


# --- one source of truth with the values file --------------------------------------------------


@pytest.mark.parametrize(("gpu", "prefix"), [("b200", "team1"), ("h200", "nemo-rl")])
def test_network_names_equal_those_of_the_values_file(cloud, tmp_path, gpu, prefix):
    script = generate(["--gpu", gpu, "--network-prefix", prefix], tmp_path / "up.sh")
    run = cloud.run(script)
    assert run.rc == 0, run.stderr
    values = build(Options(gpu=gpu, network_prefix=prefix))
    net = values["network"]

    vpcs = {sig.split()[-1] for sig in run.mutations if sig.startswith("gcloud compute networks create ")}
    assert vpcs == {net["gvnic"]["vpc"], *(r["vpc"] for r in net["rdma"])}
    subnets = {}
    for c in run.calls:
        if signature(c).startswith("gcloud compute networks subnets create "):
            subnets[signature(c).split()[-1]] = flags(c)["network"]
    assert subnets == {net["gvnic"]["subnet"]: net["gvnic"]["vpc"], **{r["subnet"]: r["vpc"] for r in net["rdma"]}}

    pool_call = next(c for c in run.calls if signature(c).startswith("gcloud container node-pools create "))
    attached = [dict(p.split("=", 1) for p in v.split(",")) for v in all_flags(pool_call, "additional-node-network")]
    assert [(a["network"], a["subnetwork"]) for a in attached] == [
        (net["gvnic"]["vpc"], net["gvnic"]["subnet"]),
        *((r["vpc"], r["subnet"]) for r in net["rdma"]),
    ]
    pool = flags(pool_call)
    assert pool["machine-type"] == values["accelerator"]["machineType"]
    assert pool["accelerator"].startswith(f"type={values['accelerator']['nodeLabel']},count={values['accelerator']['gpusPerNode']},")
    assert ("--network-prefix team1" in run.stdout) == (prefix == "team1")


def _printed_commands(stdout: str) -> dict[str, list[str]]:
    """The `python -m generator` and `helm install` commands the script prints at the end."""
    text = stdout.split("Next:", 1)[1].replace("\\\n", " ")
    found = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if words[:3] == ["python", "-m", "generator"]:
            found["generate"] = words[3:]
        elif words[:2] == ["helm", "install"]:
            found["helm"] = words
    return found


def test_printed_next_steps_write_values_that_the_chart_renders_with_the_lustre_volume(scripts, cloud, tmp_path, helms):
    run = cloud.run(scripts["h200-standard"])
    assert run.rc == 0, run.stderr
    printed = _printed_commands(run.stdout)
    values_file = tmp_path / "values-h200.yaml"
    assert cli.main([*printed["generate"], "-o", str(values_file)]) == 0
    helm_args = printed["helm"]
    assert helm_args[2:6] == ["nemo-rl", "charts/nemo-rl-gke", "-f", "values-h200.yaml"]
    sets = [helm_args[i + 1] for i, w in enumerate(helm_args) if w == "--set"]
    namespace = next(w.split("=", 1)[1] for w in helm_args if w.startswith("--namespace="))
    for helm in helms:
        objs = parse_documents(helm.template([values_file], release="nemo-rl", namespace=namespace, set_values=sets))
        pv = next(o for o in objs if o["kind"] == "PersistentVolume")
        assert pv["spec"]["csi"]["volumeHandle"] == "my-project/us-central1-b/nemo-rl-lustre"
        assert pv["spec"]["csi"]["volumeAttributes"] == {"ip": "10.90.0.5", "filesystem": "lfs"}
        assert pv["spec"]["capacity"]["storage"] == "9000Gi"
        accounts = [o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"]
        assert accounts == ["nemo-rl-launcher"], "the script created the Ray pods' account; the chart makes only the launcher's"
        ray = next(o for o in objs if o["kind"] == "RayCluster")
        assert ray["spec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] == "nemo-rl-ksa"


def test_a_reservation_path_gives_the_values_command_its_name(tmp_path, capsys):
    path = "projects/other-proj/reservations/res-a/reservationBlocks/blk-1"
    assert cli.main(["infra", "--gpu", "h200", *BASE, "--provisioning", "reservation", "--reservation", path]) == 0
    script = capsys.readouterr().out
    assert f"RESERVATION={path}" in script or f"RESERVATION='{path}'" in script  # the node pool takes the path
    (line,) = [ln.strip() for ln in script.splitlines() if ln.strip().startswith("python -m generator --gpu")]
    assert line.endswith("--provisioning reservation --reservation res-a")
    assert cli.main([*line.split()[3:], "-o", str(tmp_path / "v.yaml")]) == 0  # the printed command works


# --- the generator command itself --------------------------------------------------------------


def test_stdout_by_default_through_python_dash_m(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "generator", "infra", "--gpu", "h200", *BASE],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (GOLDEN / "h200-standard.sh").read_text()
    assert list(tmp_path.iterdir()) == []


def test_output_file_is_atomic_executable_and_not_overwritten_without_force(tmp_path, capsys):
    out = tmp_path / "up.sh"
    assert cli.main(["infra", "--gpu", "h200", *BASE, "-o", str(out)]) == 0
    assert os.access(out, os.X_OK)
    assert cli.main(["infra", "--gpu", "h200", *BASE, "-o", str(out)]) == 0
    assert "unchanged" in capsys.readouterr().err
    assert cli.main(["infra", "--gpu", "b200", *BASE, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "-o" in err and "--force" in err
    assert "a3-ultragpu-8g" in out.read_text()
    assert cli.main(["infra", "--gpu", "b200", *BASE, "-o", str(out), "--force"]) == 0
    assert "a4-highgpu-8g" in out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["up.sh"]


LONG_PROJECT = "p" + "x" * 28 + "q"  # 30 characters
BAD_INPUTS = [
    (["--project", "My-Project"], "--project"),
    (["--project", "short"], "--project"),
    (["--project", "trailing-hyphen-"], "--project"),
    (["--project", "1starts-with-digit"], "--project"),
    (["--region", "uscentral1"], "--region"),
    (["--region", "us-central"], "--region"),
    (["--zone", "us-east1-b"], "--zone"),
    (["--zone", "us-central1"], "--zone"),
    (["--zone", "us-central1-bb"], "--zone"),
    (["--network-prefix", "Bad_Prefix"], "--network-prefix"),
    (["--network-prefix=-x"], "--network-prefix"),
    (["--nodes", "0"], "--nodes"),
    (["--nodes", "65"], "--nodes"),
    (["--provisioning", "reservation"], "--reservation"),
    (["--reservation", "r1"], "--reservation"),
    (["--provisioning", "reservation", "--reservation", "Bad Name"], "--reservation"),
    (["--cluster", "Cluster"], "--cluster"),
    (["--cluster", "c" * 41], "--cluster"),
    (["--cluster", "ends-with-"], "--cluster"),
    (["--lustre-capacity-gib", "8000"], "--lustre-capacity-gib"),
    (["--lustre-capacity-gib", "9500"], "--lustre-capacity-gib"),
    (["--lustre-capacity-gib", "1548000"], "--lustre-capacity-gib"),  # above 1530000 GiB the step is 72000
    (["--lustre-throughput", "500"], "--lustre-capacity-gib"),
    (["--namespace", "Team"], "--namespace"),
    (["--ksa", "bad_name"], "--ksa"),
    (["--mode", "autopilot", "--preload-image-disk", "img"], "--preload-image-disk"),
    (["--preload-image-disk", "Bad/Image"], "--preload-image-disk"),
    (["--bucket", "goog-data"], "--bucket"),
    (["--bucket", "ab"], "--bucket"),
    (["--project", LONG_PROJECT, "--cluster", "c" * 40], "--bucket"),
    (["--bucket", "192.168.1.1"], "--bucket"),
    # "$" in a pattern matches before a final newline; each would have split the script's header
    (["--zone", "us-central1-b\n"], "--zone"),
    (["--project", "my-project\n"], "--project"),
    (["--cluster", "nemo-rl\n"], "--cluster"),
    (["--namespace", "ml\n"], "--namespace"),
    (["--ksa", "ksa\n"], "--ksa"),
    (["--provisioning", "reservation", "--reservation", "res\n"], "--reservation"),
    (["--preload-image-disk", "img\n"], "--preload-image-disk"),
    (["--bucket", "my-bucket\n"], "--bucket"),
    (["--network-prefix", "abc\n"], "--network-prefix"),
]


@pytest.mark.parametrize(("extra", "option"), BAD_INPUTS)
def test_bad_input_exits_1_with_one_line_naming_the_option_and_writes_nothing(tmp_path, capsys, extra, option):
    args = ["infra", "--gpu", "h200", *BASE]
    # a later flag overrides the base value
    rc = cli.main([*args, *extra, "-o", str(tmp_path / "up.sh")])
    captured = capsys.readouterr()
    assert rc == 1
    assert captured.err.startswith(f"error: {option}")
    assert captured.err.count("\n") == 1
    assert captured.out == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "extra",
    [["--gpu", "a100"], ["--nodes", "many"], ["--lustre-throughput", "300"], ["--mode", "serverless"], ["--provisioning", "cheap"]],
)
def test_usage_errors_exit_2_on_one_line(tmp_path, capsys, extra):
    with pytest.raises(SystemExit) as e:
        cli.main(["infra", "--gpu", "h200", *BASE, *extra, "-o", str(tmp_path / "up.sh")])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error:" in err
    assert list(tmp_path.iterdir()) == []


def test_required_options(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["infra", "--gpu", "h200", "--region", "us-central1", "--zone", "us-central1-b"])
    assert e.value.code == 2
    assert "--project" in capsys.readouterr().err
