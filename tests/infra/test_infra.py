"""`python -m generator infra`: golden scripts, shellcheck, and real runs of the generated scripts
under bash against the stand-in `gcloud`/`kubectl` of tests/infra/fake_cli (see fake_cloud.py).

Set UPDATE_GOLDEN=1 to rewrite tests/infra/golden/*.sh after a reviewed change.
"""

from __future__ import annotations

import ast
import importlib.util
import marshal
import os
import pty
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from generator import cli
from generator.gke import kueue_dra
from generator.gke.profiles import PROFILES, profile
from generator.gke.provisioning import machine_default
from generator.infra import kueue
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
SCALE_OUT = ["--groups", "reserved=4:reservation:rl-reservation,spot=4:spot", "--kueue", "--kueue-queue", "gpu-queue"]
SCALE_OUT += ["--topology", "preferred"]
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
    # the scale-out example's groups, with Kueue and topology-aware placement
    "h200-standard-scale-out": ["--gpu", "h200", *SCALE_OUT],
    "h200-standard-scale-out-teardown": ["--gpu", "h200", *SCALE_OUT, "--teardown"],
    # A4X: the 4-NIC RoCE VPC, the arm64 gIB installer and NVIDIA's DRA driver for the ComputeDomain
    # (its capacity is offered by reservation only: the default, a reservation named)
    "gb200-standard": ["--gpu", "gb200", "--reservation", "a4x-r1"],
    # GKE managed DRANET: Dataplane V2, --accelerator-network-profile=auto, no VPC of the NICs' own
    "h200-standard-dranet": ["--gpu", "h200", "--network-mode", "dranet"],
}
VARIANTS = {
    **GOLDEN_CASES,
    "reservation-preload": [
        *("--gpu", "b200", "--provisioning", "reservation", "--reservation", RESERVATION),
        *("--preload-image-disk", "nemo-rl-v050-cache", "--network-prefix", "team1", "--cluster", "grpo"),
    ],
    "dry-run-default": ["--gpu", "h200", "--dry-run", "--namespace", "rl"],
    "autopilot-teardown": ["--gpu", "b200", "--mode", "autopilot", "--teardown"],
    "team-network": ["--gpu", "h200", "--network", "team-net"],
    "team-network-teardown": ["--gpu", "h200", "--network", "team-net", "--teardown"],
    "other-gib": ["--gpu", "h200", "--gib-version", "v1.2.0", "--rdma-installer-commit", "155bfa49b7459a55c2352495d3eeb46a55637be6"],
    "flex-start-groups": ["--gpu", "h200", "--groups", "a=1:flex-start,b=1:on-demand"],
    "h200-standard-dranet-teardown": ["--gpu", "h200", "--network-mode", "dranet", "--teardown"],
    "gb200-standard-dranet-kueue": ["--gpu", "gb200", "--network-mode", "dranet", "--kueue", "--nodes", "3", "--reservation", "a4x-r1"],
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
    assert "--reservation-affinity=specific" in text and f"--reservation={RESERVATION}" in text
    flex = scripts["b200-standard-flex-start"].read_text()
    for f in ("--flex-start", "--enable-autoscaling", "--num-nodes=0", "--total-max-nodes=4", "--location-policy=ANY"):
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

    def run(self, script: Path, *args: str, fail_at: int = 0, stdin: str = "", env: dict[str, str] | None = None, yes: bool = True) -> Run:
        """Run the script under bash with the stand-ins first on PATH; --yes unless yes=False."""
        args = (*args, "--yes") if yes and "--dry-run" not in args else args
        return self._run(script, args, fail_at=fail_at, stdin=stdin, env=env)

    def on_terminal(self, script: Path, answer: str) -> Run:
        """Run the script with a terminal (a pseudo-terminal) as its standard input, typing `answer`."""
        return self._run(script, (), terminal=answer)

    def _run(
        self,
        script: Path,
        args: tuple[str, ...],
        *,
        fail_at: int = 0,
        stdin: str = "",
        env: dict[str, str] | None = None,
        terminal: str | None = None,
    ) -> Run:
        self.runs += 1
        log = self.root / f"calls-{self.runs}.jsonl"
        full_env = {k: v for k, v in os.environ.items() if k not in ("GKE_VERSION", "FAKE_FAIL_AT", "FAKE_GKE_VERSION", "FAKE_GPU_QUOTA")}
        full_env.update(
            PATH=f"{FAKE_CLI}{os.pathsep}{os.environ.get('PATH', '')}",
            FAKE_PYTHON=sys.executable,
            FAKE_STATE=str(self.state),
            FAKE_LOG=str(log),
            FAKE_FAIL_AT=str(fail_at or ""),
        )
        full_env.update(env or {})
        if terminal is None:
            argv = [BASH, str(script), *args]
            proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, env=full_env, cwd=self.root, check=False, timeout=120)
        else:
            controller, tty = pty.openpty()
            os.write(controller, terminal.encode())  # waits in the terminal's line buffer until the script reads it
            try:
                argv = [BASH, str(script), *args]
                proc = subprocess.run(
                    argv, stdin=tty, capture_output=True, text=True, env=full_env, cwd=self.root, check=False, timeout=120
                )
            finally:
                os.close(tty)
                os.close(controller)
        calls = [ast.literal_eval(line) for line in log.read_text().splitlines()] if log.exists() else []
        return Run(proc.returncode, proc.stdout, proc.stderr, calls)

    def resources(self) -> set[str]:
        if not self.state.exists():
            return set()
        return set(marshal.loads(self.state.read_bytes())["resources"])  # noqa: S302 - the fake's own state file

    def seed(self, resources: dict[str, dict[str, Any]]) -> None:
        self.state.write_bytes(marshal.dumps({"resources": {"compute/networks/default": dict(fake_cloud.DEFAULT_NETWORK), **resources}}))


@pytest.fixture
def cloud(tmp_path: Path) -> FakeCloud:
    return FakeCloud(tmp_path)


PSA_LABELS = " ".join(
    f"pod-security.kubernetes.io/{mode}={level}" for mode, level in (("enforce", "privileged"), ("warn", "baseline"), ("audit", "baseline"))
)


def expected_creates(gpu: str, mode: str, prefix: str = "nemo-rl", cluster: str = "nemo-rl", namespace: str = "nemo-rl") -> list[str]:
    apis = "compute.googleapis.com container.googleapis.com servicenetworking.googleapis.com lustre.googleapis.com"
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
        f"kubectl create namespace {namespace}",
        f"kubectl label namespace {namespace} {PSA_LABELS}",
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
    assert c["cluster-version"] == "1.33.5-gke.1080000"  # the fake's default version, >= every floor
    assert "enable-multi-networking" in c and "enable-legacy-lustre-port" not in c  # deprecated: Lustre on port 988
    assert c["labels"] == "nemo-rl-gke-infra=nemo-rl"  # the teardown deletes only a cluster with this label
    if mode == "standard":
        assert c["addons"] == "HttpLoadBalancing,HorizontalPodAutoscaling,RayOperator,LustreCsiDriver"
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
    assert rdma["description"] == "nemo-rl-gke infra: cluster nemo-rl"
    installer = next(x for x in first.calls if signature(x) == "kubectl apply")
    assert flags(installer)["-f"] == (
        "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators/"
        "2da1c92ff7bd772a2c833710bb6c21dcfe6dfaae/gpudirect-rdma/"
        + ("nccl-rdma-installer-autopilot.yaml" if mode == "autopilot" else "nccl-rdma-installer.yaml")
    )
    assert not any(signature(x).startswith("kubectl set image") for x in first.calls)  # the manifest's gIB v1.1.1
    lustre = first.call("gcloud lustre instances create nemo-rl-lustre")
    assert lustre["location"] == "us-central1-b"
    assert lustre["network"] == "projects/my-project/global/networks/default"
    assert "gke-support-enabled" not in lustre
    assert (lustre["capacity-gib"], lustre["per-unit-storage-throughput"], lustre["filesystem"]) == ("9000", "1000", "lfs")
    assert first.call("gcloud compute firewall-rules create nemo-rl-lustre")["allow"] == "tcp:988"
    assert first.call(f"kubectl label namespace nemo-rl {PSA_LABELS}") == {"overwrite": ""}
    assert "! default has MTU 1460; Managed Lustre recommends 8896" in first.stdout  # an existing VPC is kept as it is
    overlay = yaml.safe_load((cloud.root / "values-infra.yaml").read_text())
    assert overlay["storage"]["lustre"] == {
        "volumeHandle": "my-project/us-central1-b/nemo-rl-lustre",
        "ip": "10.90.0.5",
        "filesystem": "lfs",
        "capacity": "9000Gi",
    }
    for line in (f"-f values-{gpu}.yaml -f values-infra.yaml", "--namespace=nemo-rl", f"python -m generator validate values-{gpu}.yaml"):
        assert line in first.stdout
    assert ("--mode autopilot" in first.stdout) == (mode == "autopilot")

    second = cloud.run(scripts[f"{gpu}-{mode}"])
    assert second.rc == 0, second.stderr
    assert second.mutations == []
    assert "Wrote values-infra.yaml" in second.stdout
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
    assert f"# Autoscaled from 0 to {nodes} nodes" in text
    assert "https://docs.cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler" in text


@pytest.mark.parametrize("variant", ["reservation-preload", "h200-standard-reservation"])
def test_reservation_pool_is_fixed_at_nodes_and_the_script_says_why(scripts, cloud, variant):
    pool_name, nodes, extra = POOL_SIZING_CASES[variant]
    pool = _pool_call(cloud.run(scripts[variant]), pool_name)
    assert pool.items() >= {"num-nodes": nodes, **extra}.items()
    assert not {"enable-autoscaling", "total-min-nodes", "total-max-nodes", "min-nodes", "max-nodes", "location-policy"} & pool.keys()
    text = scripts[variant].read_text()
    assert f"# Fixed at {nodes} nodes, not autoscaled: a reservation is billed" in text
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
    "kubectl create namespace",
    "kubectl label namespace",
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


@pytest.mark.parametrize("k", [1, 14, 21])
def test_autopilot_failure_and_rerun(scripts, cloud, k):
    creates = expected_creates("b200", "autopilot")
    failed = cloud.run(scripts["b200-autopilot"], fail_at=k)
    assert failed.rc != 0 and failed.mutations == creates[:k]
    rerun = cloud.run(scripts["b200-autopilot"])
    assert rerun.rc == 0, rerun.stderr
    assert rerun.mutations == creates[k - 1 :]


@pytest.mark.parametrize("version", ["1.32.1-gke.100", "1.33.2-gke.1200000"])
def test_gke_version_below_the_highest_floor_stops_before_the_cluster(scripts, cloud, version):
    # 1.32.1: below the B200 minimum; 1.33.2-gke.1200000: past the Lustre CSI driver's minimum but
    # before Lustre on port 988 without the deprecated legacy port
    run = cloud.run(scripts["b200-standard"], env={"FAKE_GKE_VERSION": version})
    assert run.rc == 1
    assert f"GKE {version} is older than 1.33.2-gke.4655000, the minimum for Lustre on port 988" in run.stderr
    assert not any("clusters create" in m for m in run.mutations)
    text = scripts["b200-standard"].read_text()
    for floor in ("1.32.4-gke.1236000  a4-highgpu-8g", "1.33.2-gke.1111000  the Managed Lustre CSI driver", "1.33.2-gke.4655000  Lustre"):
        assert floor in text
    assert "flex-start node pools" not in text and "1.32.2-gke.1652000  flex-start node pools" in scripts["flex-start-groups"].read_text()
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

    refused = cloud.run(scripts["h200-standard-teardown"], stdin="n\n", yes=False)
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
    created = [m.replace(" create ", " ") for m in up.mutations]
    deleted = [d.replace(" delete ", " ") for d in down.mutations]
    own = [d for d in deleted if d in created]
    assert own == [c for c in reversed(created) if c in own]
    assert cloud.resources() == {"compute/networks/default"} | {r for r in before if r.startswith("api/")}
    assert "! kept VPC default: this script did not create it" in down.stdout

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
    assert "? owner: gcloud container clusters describe nemo-rl" in run.stdout
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
    """The `python -m generator`, `validate` and `helm install` commands the script prints at the end."""
    found = {}
    for line in stdout.split("Next:", 1)[1].splitlines():
        words = shlex.split(line)
        if words[:4] == ["python", "-m", "generator", "validate"]:
            found["validate"] = words[3:]
        elif words[:3] == ["python", "-m", "generator"]:
            found["generate"] = words[3:]
        elif words[:2] == ["helm", "install"]:
            found["helm"] = words
    return found


def _follow_printed_steps(run: Run, root: Path, helms: list[Any]) -> list[list[dict[str, Any]]]:
    """Write the values file as printed, validate it with the overlay as printed, render both with each Helm."""
    printed = _printed_commands(run.stdout)
    gpu = printed["generate"][printed["generate"].index("--gpu") + 1]
    values_file = root / f"values-{gpu}.yaml"
    assert cli.main([*printed["generate"], "-o", str(values_file)]) == 0
    cwd = os.getcwd()
    os.chdir(root)  # the printed commands name both files relative to where the script ran
    try:
        assert cli.main(printed["validate"]) == 0
    finally:
        os.chdir(cwd)
    helm_args = printed["helm"]
    files = [root / helm_args[i + 1] for i, w in enumerate(helm_args) if w == "-f"]
    assert [f.name for f in files] == [values_file.name, "values-infra.yaml"]
    namespace = next(w.split("=", 1)[1] for w in helm_args if w.startswith("--namespace="))
    return [parse_documents(helm.template(files, release="nemo-rl", namespace=namespace)) for helm in helms]


def test_printed_next_steps_validate_and_render_the_lustre_volume_from_the_overlay(scripts, cloud, helms, capsys):
    run = cloud.run(scripts["h200-standard"])
    assert run.rc == 0, run.stderr
    for objs in _follow_printed_steps(run, cloud.root, helms):
        pv = next(o for o in objs if o["kind"] == "PersistentVolume")
        assert pv["spec"]["csi"]["volumeHandle"] == "my-project/us-central1-b/nemo-rl-lustre"
        assert pv["spec"]["csi"]["volumeAttributes"] == {"ip": "10.90.0.5", "filesystem": "lfs"}
        assert pv["spec"]["capacity"]["storage"] == "9000Gi"
        accounts = sorted(o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount")
        assert accounts == ["nemo-rl", "nemo-rl-launcher"]  # the chart's own (the Ray pods', the launcher's): the script makes none
    assert "valid: 1 file(s), 0 error(s), 0 warning(s)" in capsys.readouterr().err  # no placeholder left


def test_a_hand_edited_worker_group_survives_the_overlay_as_installed(scripts, cloud, helms, capsys):
    """Helm replaces a list whole when it merges values: an overlay carrying `workerGroups` would undo
    the user's edits to it. Installed as documented (`-f values.yaml -f values-infra.yaml`), each edit stays."""
    run = cloud.run(scripts["h200-standard-scale-out"])
    assert run.rc == 0, run.stderr
    printed = _printed_commands(run.stdout)
    values_file = cloud.root / "values-h200.yaml"
    assert cli.main([*printed["generate"], "-o", str(values_file)]) == 0
    values = yaml.safe_load(values_file.read_text())
    edited = values["workerGroups"][-1]
    edited["replicas"] += 1
    edited["tolerations"] = [{"key": "team", "operator": "Equal", "value": "rl", "effect": "NoSchedule"}]
    edited["nodeSelector"] = {"example.com/rack": "r7"}
    values_file.write_text(yaml.safe_dump(values, sort_keys=False))
    files = [values_file, cloud.root / "values-infra.yaml"]
    for helm in helms:
        objs = parse_documents(helm.template(files, release="nemo-rl", namespace="nemo-rl"))
        rc = next(o for o in objs if o["kind"] == "RayCluster")
        spec = {g["groupName"]: g for g in rc["spec"]["workerGroupSpecs"]}
        assert set(spec) == {g["name"] for g in values["workerGroups"]}
        group = spec[edited["name"]]
        assert group["replicas"] == edited["replicas"]
        pod = group["template"]["spec"]
        assert edited["tolerations"][0] in pod["tolerations"]
        assert pod["nodeSelector"]["example.com/rack"] == "r7"
        pv = next(o for o in objs if o["kind"] == "PersistentVolume")
        assert pv["spec"]["csi"]["volumeAttributes"]["ip"] == "10.90.0.5"  # the overlay still brings the Lustre instance


def test_a_reservation_path_gives_the_values_command_its_name_and_project(tmp_path, capsys):
    path = "projects/other-proj/reservations/res-a/reservationBlocks/blk-1"
    assert cli.main(["infra", "--gpu", "h200", *BASE, "--provisioning", "reservation", "--reservation", path]) == 0
    script = capsys.readouterr().out
    assert f"--reservation={path}" in script or f"--reservation='{path}'" in script  # the node pool takes the path
    (line,) = [ln.strip() for ln in script.splitlines() if ln.strip().startswith("python -m generator --gpu")]
    assert line.endswith("--provisioning reservation --reservation res-a --reservation-project other-proj")
    assert cli.main([*line.split()[3:], "-o", str(tmp_path / "v.yaml")]) == 0  # the printed command works
    groups = yaml.safe_load((tmp_path / "v.yaml").read_text())["workerGroups"]
    assert (groups[0]["reservationName"], groups[0]["reservationProject"]) == ("res-a", "other-proj")
    assert "# GPU pools made: gpu=2 (reservation res-a of project other-proj)." in script  # and the overlay names the pool


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
    (["--mode", "autopilot", "--preload-image-disk", "img"], "--preload-image-disk"),
    (["--preload-image-disk", "Bad/Image"], "--preload-image-disk"),
    # "$" in a pattern matches before a final newline; each would have split the script's header
    (["--zone", "us-central1-b\n"], "--zone"),
    (["--project", "my-project\n"], "--project"),
    (["--cluster", "nemo-rl\n"], "--cluster"),
    (["--namespace", "ml\n"], "--namespace"),
    (["--provisioning", "reservation", "--reservation", "res\n"], "--reservation"),
    (["--preload-image-disk", "img\n"], "--preload-image-disk"),
    (["--network-prefix", "abc\n"], "--network-prefix"),
    (["--network", "Team_Net"], "--network"),
    (["--network", "net\n"], "--network"),
    (["--groups", "a=1:spot", "--nodes", "2"], "--groups"),
    (["--groups", "Train=1"], "--groups"),
    (["--groups", "a=1,a=2"], "--groups"),
    (["--groups", "a=1:reservation"], "--groups"),
    (["--groups", "a=1:spot:res-a"], "--groups"),
    (["--groups", "a=40,b=30"], "--groups"),
    (["--groups", "a=x"], "--groups"),
    (["--topology", "required"], "--topology"),
    (["--kueue", "--kueue-queue", "Gpu"], "--kueue-queue"),
    (["--gib-version", "latest"], "--gib-version"),
    (["--rdma-installer-commit", "master"], "--rdma-installer-commit"),
    (["--values-out", "../x.yaml"], "--values-out"),
    (["--values-out", "values.json"], "--values-out"),
    (["--mode", "autopilot", "--network-mode", "dranet"], "--network-mode"),  # managed DRANET: Standard only
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
    [
        ["--gpu", "a100"],
        ["--nodes", "many"],
        ["--lustre-throughput", "300"],
        ["--mode", "serverless"],
        ["--provisioning", "cheap"],
        ["--network-mode", "tcp"],
    ],
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


# --- asking first --------------------------------------------------------------------------------


def test_without_a_terminal_or_yes_it_refuses_before_any_call(scripts, cloud):
    run = cloud.run(scripts["h200-standard"], yes=False)
    assert run.rc == 1 and run.calls == []
    assert "no terminal to ask on, and no --yes: nothing was created" in run.stderr


def test_on_a_terminal_it_lists_what_it_creates_with_prices_and_asks_once(scripts, cloud):
    refused = cloud.on_terminal(scripts["h200-standard"], "no\n")
    assert refused.rc == 1 and refused.calls == [] and "aborted: nothing was created" in refused.stderr
    shown = refused.stdout
    assert shown.count("Type yes to go on") == 1
    for item in (
        "This creates, in project my-project, whatever of the following is missing",
        "GKE Standard cluster nemo-rl in us-central1: USD 0.10 per hour (GKE's cluster management fee,"
        " https://cloud.google.com/kubernetes-engine/pricing)",
        "GPU node pool gpu-h200: 0 to 2 x a3-ultragpu-8g (8 x NVIDIA H200 141GB), Spot",
        "price: https://cloud.google.com/spot-vms/pricing",
        "Managed Lustre nemo-rl-lustre in us-central1-b: 9000 GiB at 1000 MB/s per TiB, billed per GiB until it is deleted",
        "VPC default (MTU 8896, auto subnets) unless it exists",
    ):
        assert item in shown, item
    accepted = cloud.on_terminal(scripts["h200-standard"], "yes\n")
    assert accepted.rc == 0, accepted.stderr
    assert accepted.mutations == expected_creates("h200", "standard")
    assert accepted.stdout.count("Type yes to go on") == 1


def test_dry_run_never_asks(scripts, cloud):
    run = cloud.run(scripts["h200-standard"], "--dry-run", yes=False)
    assert run.rc == 0 and run.calls == [] and "Type yes" not in run.stdout


# --- the cluster's VPC, and deleting only what the script made ------------------------------------


def test_a_missing_vpc_is_created_with_lustres_mtu_and_the_teardown_deletes_only_that_one(scripts, cloud):
    up = cloud.run(scripts["team-network"])
    assert up.rc == 0, up.stderr
    net = up.call("gcloud compute networks create team-net")
    assert (net["mtu"], net["subnet-mode"], net["description"]) == ("8896", "auto", "nemo-rl-gke infra: cluster nemo-rl")
    assert up.mutations.index("gcloud compute networks create team-net") < up.mutations.index("gcloud container clusters create nemo-rl")
    assert up.call("gcloud container clusters create nemo-rl")["network"] == "team-net"
    assert up.call("gcloud lustre instances create nemo-rl-lustre")["network"] == "projects/my-project/global/networks/team-net"
    assert up.call("gcloud compute addresses create nemo-rl-lustre-psa")["network"] == "team-net"
    assert up.call("gcloud services vpc-peerings connect")["network"] == "team-net"
    down = cloud.run(scripts["team-network-teardown"])
    assert down.rc == 0, down.stderr
    assert down.mutations[-1] == "gcloud compute networks delete team-net"
    assert cloud.resources() == {"compute/networks/default"} | {r for r in cloud.resources() if r.startswith("api/")}


def test_an_existing_vpc_without_a_subnet_in_the_region_stops_before_the_cluster(scripts, cloud):
    cloud.seed({"compute/networks/team-net": {"subnet-mode": "custom", "mtu": "8896"}})
    run = cloud.run(scripts["team-network"])
    assert run.rc == 1
    assert "VPC team-net has no subnet in us-central1: add one, or choose another --network" in run.stderr
    assert run.mutations == [expected_creates("h200", "standard")[0]]  # the APIs only


def test_the_teardown_keeps_what_the_script_did_not_create(scripts, cloud):
    cloud.seed(
        {
            "container/clusters/nemo-rl": {"location": "us-central1"},  # no label: somebody else's cluster
            "compute/networks/nemo-rl-gvnic-net": {"subnet-mode": "custom"},  # no mark
            "compute/addresses/nemo-rl-lustre-psa": {"network": "default"},
            "peering/default": {"network": "default", "ranges": ["nemo-rl-lustre-psa"]},
        }
    )
    before = cloud.resources()
    down = cloud.run(scripts["h200-standard-teardown"])
    assert down.rc == 0, down.stderr
    assert down.mutations == [] and cloud.resources() == before
    for kept in (
        "! kept cluster nemo-rl",
        "! kept VPC nemo-rl-gvnic-net",
        "! kept range nemo-rl-lustre-psa and its peering",
        "! kept VPC default",
    ):
        assert kept in down.stdout, kept


# --- the NCCL RDMA installer, pinned ---------------------------------------------------------------


def test_the_installer_is_applied_from_a_pinned_commit_and_its_gib_can_be_chosen(scripts, cloud):
    moving = ("container-engine-accelerators/refs/", "container-engine-accelerators/master/")
    assert not any(m in s.read_text() for s in scripts.values() for m in moving)
    run = cloud.run(scripts["other-gib"])
    assert run.rc == 0, run.stderr
    applied = next(c for c in run.calls if signature(c) == "kubectl apply")
    assert "/container-engine-accelerators/155bfa49b7459a55c2352495d3eeb46a55637be6/gpudirect-rdma/" in flags(applied)["-f"]
    image = "nccl-rdma-installer=us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.2.0"
    assert f"kubectl set image daemonset/nccl-rdma-installer {image}" in run.mutations
    assert "gIB v1.1.1" in scripts["h200-standard"].read_text()  # the default commit's, named


# --- quotas ----------------------------------------------------------------------------------------


def test_too_little_gpu_quota_stops_before_anything_is_created(scripts, cloud):
    run = cloud.run(scripts["h200-standard"], env={"FAKE_GPU_QUOTA": "24 16"})
    assert run.rc == 1
    assert "quota PREEMPTIBLE_NVIDIA_H200_GPUS in us-central1 has 8 GPUs left (16 of 24 used), the GPU pools need up to 16" in run.stderr
    assert run.mutations == [expected_creates("h200", "standard")[0]]  # the APIs, which the quota read needs
    unknown = cloud.run(scripts["h200-standard"], env={"FAKE_GPU_QUOTA": "none"})
    assert unknown.rc == 0 and "us-central1 shows no quota PREEMPTIBLE_NVIDIA_H200_GPUS: not checked" in unknown.stdout


def test_quota_metrics_follow_the_provisioning(scripts):
    assert "need_gpus NVIDIA_H200_GPUS 16" in scripts["h200-standard-on-demand"].read_text()
    assert "need_gpus PREEMPTIBLE_NVIDIA_B200_GPUS 32" in scripts["b200-standard-flex-start"].read_text()
    assert "need_gpus" not in scripts["h200-standard-reservation"].read_text()  # the reservation holds its GPUs
    assert "need_gpus PREEMPTIBLE_NVIDIA_H200_GPUS 8\nneed_gpus NVIDIA_H200_GPUS 8" in scripts["flex-start-groups"].read_text()


# --- the scale-out example: worker groups, Kueue, topology-aware placement ------------------------


def _kueue_objects(run: Run) -> list[dict[str, Any]]:
    (applied,) = [c for c in run.calls if signature(c) == "kubectl apply" and flags(c)["-f"] == "-"]
    return list(yaml.safe_load_all(applied["stdin"]))


def test_the_scale_out_example_comes_up_with_its_pools_kueue_and_topology(scripts, cloud, helms, capsys):
    run = cloud.run(scripts["h200-standard-scale-out"])
    assert run.rc == 0, run.stderr
    reserved = run.call("gcloud container node-pools create gpu-h200-reserved")
    assert (reserved["num-nodes"], reserved["reservation"], reserved["reservation-affinity"]) == ("4", "rl-reservation", "specific")
    spot = run.call("gcloud container node-pools create gpu-h200-spot")
    assert "spot" in spot and spot["total-max-nodes"] == "4"
    kueue_install = next(c for c in run.calls if signature(c) == "kubectl apply" and "kueue" in flags(c)["-f"])
    assert flags(kueue_install)["-f"].endswith("/kueue/releases/download/v0.19.2/manifests.yaml") and "server-side" in flags(kueue_install)
    objs = _kueue_objects(run)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    (topology,) = by_kind["Topology"]
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        "cloud.google.com/gce-topology-block",
        "cloud.google.com/gce-topology-subblock",
        "cloud.google.com/gce-topology-host",
        "kubernetes.io/hostname",
    ]
    flavors = {f["metadata"]["name"]: f["spec"] for f in by_kind["ResourceFlavor"]}
    assert flavors["cpu"] == {}
    gpu_flavors = {k: v for k, v in flavors.items() if k != "cpu"}
    assert all(f["topologyName"] == "gke-default" for f in gpu_flavors.values())
    (cq,) = by_kind["ClusterQueue"]
    (lq,) = by_kind["LocalQueue"]
    assert (lq["metadata"]["name"], lq["metadata"]["namespace"]) == ("gpu-queue", "nemo-rl")
    assert lq["spec"]["clusterQueue"] == cq["metadata"]["name"]
    quota = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in cq["spec"]["resourceGroups"][0]["flavors"]}
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["name"] == "cpu"
    assert quota["cpu"]["nvidia.com/gpu"] == "0"  # the head's flavor: GPU workers never get it

    for rendered in _follow_printed_steps(run, cloud.root, helms):
        rc = next(o for o in rendered if o["kind"] == "RayCluster")
        assert rc["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "gpu-queue"
        for g in rc["spec"]["workerGroupSpecs"]:
            tpl = g["template"]
            assert tpl["metadata"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"] == "cloud.google.com/gce-topology-block"
            # exactly one GPU flavor fits each group's own node selector, with quota for all of its GPUs
            fits = [n for n, f in gpu_flavors.items() if f["nodeLabels"].items() <= tpl["spec"]["nodeSelector"].items()]
            assert len(fits) == 1, (g["groupName"], fits)
            assert int(quota[fits[0]]["nvidia.com/gpu"]) >= g["replicas"] * 8
    assert "valid: 1 file(s), 0 error(s), 0 warning(s)" in capsys.readouterr().err
    # the committed example has the same queue, and the overlay leaves its groups alone, so it installs with this overlay too
    example = yaml.safe_load((ROOT / "examples" / "scale-out-h200.yaml").read_text())
    overlay = yaml.safe_load((cloud.root / "values-infra.yaml").read_text())
    assert "workerGroups" not in overlay
    assert overlay["kueue"]["queueName"] == example["kueue"]["queueName"]
    assert cli.main(["validate", str(ROOT / "examples" / "scale-out-h200.yaml"), "-f", str(cloud.root / "values-infra.yaml")]) == 0

    down = cloud.run(scripts["h200-standard-scale-out-teardown"])
    assert down.rc == 0, down.stderr
    assert "Kueue and its queues" in scripts["h200-standard-scale-out-teardown"].read_text()


# --- what the script says to do next ---------------------------------------------------------


@pytest.mark.parametrize("gpu", sorted(PROFILES))
def test_a_one_node_cluster_is_pointed_at_the_quickstart(tmp_path, gpu):
    reserved = ["--reservation", "r1"] if machine_default(PROFILES[gpu]) == "reservation" else []  # A4X: no other way
    text = generate(["--gpu", gpu, "--nodes", "1", *reserved], tmp_path / "one.sh").read_text()
    quickstart = f"examples/quickstart-{gpu}.yaml"
    assert (ROOT / quickstart).is_file()
    assert f"helm install nemo-rl charts/nemo-rl-gke --namespace=$NAMESPACE -f {quickstart} -f $VALUES_OUT" in text
    assert f"python -m generator validate {quickstart} -f $VALUES_OUT" in text


def test_a_larger_cluster_is_pointed_at_its_own_generated_values(tmp_path):
    text = generate(["--gpu", "h200", "--nodes", "2"], tmp_path / "two.sh").read_text()
    assert "examples/quickstart" not in text
    assert "python -m generator --gpu h200 --nodes 2 --provisioning spot" in text
    assert "helm install nemo-rl charts/nemo-rl-gke --namespace=$NAMESPACE -f values-h200.yaml -f $VALUES_OUT" in text


# --- A4X: NVIDIA's DRA driver; managed DRANET; the GKE version floor --------------------------------

DRANET_GKE = {"FAKE_GKE_VERSION": "1.34.1-gke.1829001"}  # the managed DRANET floor itself


def _helm_install(run: Run) -> dict[str, Any]:
    [call] = [c for c in run.calls if signature(c).startswith("helm install ")]
    assert call["rc"] == 0
    return call


def test_gb200_gets_four_rdma_subnets_the_arm64_installer_and_the_dra_driver_with_gkes_values(scripts, cloud):
    run = cloud.run(scripts["gb200-standard"])
    assert run.rc == 0, run.stderr
    subnets = [m for m in run.mutations if m.startswith("gcloud compute networks subnets create nemo-rl-rdma-sub-")]
    assert subnets == [f"gcloud compute networks subnets create nemo-rl-rdma-sub-{i}" for i in range(4)]
    pool_call = next(c for c in run.calls if signature(c) == "gcloud container node-pools create gpu-gb200")
    assert flags(pool_call)["accelerator"] == "type=nvidia-gb200,count=4,gpu-driver-version=latest"
    assert len(all_flags(pool_call, "additional-node-network")) == 1 + 4
    installer = next(c for c in run.calls if signature(c) == "kubectl apply" and flags(c)["-f"] != "-")
    assert flags(installer)["-f"].endswith("/gpudirect-rdma/nccl-rdma-installer-a4x.yaml")

    # the driver's namespace, GKE's quota for its critical pods (2 per GPU node + 1), then the chart
    order = run.mutations
    quota_at = order.index("kubectl apply", order.index("kubectl create namespace nvidia-dra-driver-gpu"))
    [quota_call] = [c for c in run.calls if signature(c) == "kubectl apply" and "stdin" in c and "ResourceQuota" in c["stdin"]]
    quota = yaml.safe_load(quota_call["stdin"])
    assert quota["metadata"] == {"name": "nvidia-dra-driver-gpu-quota", "namespace": "nvidia-dra-driver-gpu"}
    assert quota["spec"]["hard"] == {"pods": "5"}  # 2 nodes
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["system-node-critical", "system-cluster-critical"]
    helm_call = _helm_install(run)
    words, _ = fake_cloud.parse(helm_call["argv"])
    assert words == ["install", "dra-driver-nvidia-gpu", "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"]
    assert flags(helm_call)["version"] == "0.4.1" and flags(helm_call)["namespace"] == "nvidia-dra-driver-gpu"
    assert quota_at < order.index("helm install dra-driver-nvidia-gpu oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu")
    assert order.index("gcloud container node-pools create gpu-gb200") < quota_at
    values = yaml.safe_load(helm_call["stdin"])
    assert values["nvidiaDriverRoot"] == "/home/kubernetes/bin/nvidia"
    assert values["resources"] == {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}}
    [term] = values["kubeletPlugin"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {e["key"]: e["values"] for e in term["matchExpressions"]} == {
        "cloud.google.com/gke-accelerator": ["nvidia-gb200"],
        "kubernetes.io/arch": ["arm64"],
    }
    taints = {(t["key"], t.get("value"), t["effect"]) for t in values["kubeletPlugin"]["tolerations"]}
    assert taints == {("nvidia.com/gpu", "present", "NoSchedule"), ("kubernetes.io/arch", "arm64", "NoSchedule")}

    again = cloud.run(scripts["gb200-standard"])
    assert again.rc == 0 and again.mutations == []  # the release is found with helm status


def test_only_machines_with_a_compute_domain_get_the_dra_driver(scripts):
    for name in ("h200-standard", "b200-standard", "h200-standard-dranet", "b200-autopilot"):
        text = scripts[name].read_text()
        assert "run helm" not in text and "command -v helm" not in text and "DRA_" not in text, name
    assert "command -v helm" in scripts["gb200-standard"].read_text()  # the tool is checked before any step


def test_dranet_creates_no_nic_vpcs_and_attaches_the_nics_through_the_accelerator_network_profile(scripts, cloud, helms, capsys):
    run = cloud.run(scripts["h200-standard-dranet"], env=DRANET_GKE)
    assert run.rc == 0, run.stderr
    assert not [m for m in run.mutations if m.startswith(("gcloud compute networks create", "gcloud compute networks subnets create"))]
    assert not [m for m in run.mutations if "gvnic" in m]
    cluster = run.call("gcloud container clusters create nemo-rl")
    assert "enable-dataplane-v2" in cluster and "enable-multi-networking" not in cluster
    assert cluster["cluster-version"] == "1.34.1-gke.1829001"
    pool_call = next(c for c in run.calls if signature(c) == "gcloud container node-pools create gpu-h200")
    assert flags(pool_call)["accelerator-network-profile"] == "auto"
    assert all_flags(pool_call, "additional-node-network") == []
    overlay = yaml.safe_load((cloud.root / "values-infra.yaml").read_text())
    assert overlay["network"] == {"mode": "dranet"}
    assert "--network dranet" in run.stdout
    # the values file printed with it, with the overlay, validates and renders with both Helm majors
    for objs in _follow_printed_steps(run, cloud.root, helms):
        templates = [o for o in objs if o["kind"] == "ResourceClaimTemplate"]
        assert any(t["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "mrdma.google.com" for t in templates)
        assert not [o for o in objs if o["kind"] in ("Network", "GKENetworkParamSet")]
    assert "valid: 1 file(s), 0 error(s)" in capsys.readouterr().err


@pytest.mark.parametrize("version", ["1.33.5-gke.1080000", "1.34.1-gke.1829000"])
def test_dranet_below_its_gke_floor_stops_before_the_cluster(scripts, cloud, version):
    run = cloud.run(scripts["h200-standard-dranet"], env={"FAKE_GKE_VERSION": version})
    assert run.rc == 1
    assert f"GKE {version} is older than 1.34.1-gke.1829001, the minimum for managed DRANET" in run.stderr
    assert "stopped in step 4/12, GKE version floor" in run.stderr
    assert not any("clusters create" in m for m in run.mutations)
    assert "1.34.1-gke.1829001  managed DRANET" in scripts["h200-standard-dranet"].read_text()


def test_an_existing_cluster_below_the_floor_stops_before_its_node_pools(scripts, cloud):
    cloud.seed({"container/clusters/nemo-rl": {"cluster-version": "1.33.5-gke.1080000", "labels": "nemo-rl-gke-infra=nemo-rl"}})
    run = cloud.run(scripts["h200-standard-dranet"], env=DRANET_GKE)  # the default for a new cluster would do
    assert run.rc == 1
    assert "cluster nemo-rl runs GKE 1.33.5-gke.1080000, older than 1.34.1-gke.1829001, the minimum for managed DRANET" in run.stderr
    assert not any("node-pools create" in m or "clusters create" in m for m in run.mutations)
    cloud.seed({"container/clusters/nemo-rl": {"cluster-version": "1.34.2-gke.1000", "labels": "nemo-rl-gke-infra=nemo-rl"}})
    newer = cloud.run(scripts["h200-standard-dranet"])
    assert newer.rc == 0, newer.stderr
    assert "gcloud container node-pools create gpu-h200" in newer.mutations
    assert "= GKE 1.34.2-gke.1000: not older than 1.34.1-gke.1829001" in newer.stdout


def test_dranet_teardown_deletes_no_nic_vpc(scripts, cloud):
    assert cloud.run(scripts["h200-standard-dranet"], env=DRANET_GKE).rc == 0
    down = cloud.run(scripts["h200-standard-dranet-teardown"], "--yes")
    assert down.rc == 0, down.stderr
    assert down.mutations == [d for d in EXPECTED_DELETES if "rdma" not in d and "gvnic" not in d]
    assert "$RDMA_VPC" not in scripts["h200-standard-dranet-teardown"].read_text()


def test_the_kueue_the_script_installs_is_the_one_the_test_bed_runs() -> None:
    """What tests/cluster shows of Kueue (admission, topology, DRA quota) holds for the release users install."""
    from testbed.components import KUEUE

    assert KUEUE.version == kueue.VERSION


def test_gb200_with_dranet_and_kueue_writes_the_kueue_version_and_sizes_the_driver_quota(scripts, cloud):
    run = cloud.run(scripts["gb200-standard-dranet-kueue"], env=DRANET_GKE)
    assert run.rc == 0, run.stderr
    overlay = yaml.safe_load((cloud.root / "values-infra.yaml").read_text())
    assert overlay["kueue"]["version"] == kueue.VERSION  # the release the script installed
    assert overlay["network"] == {"mode": "dranet"}
    pool_call = next(c for c in run.calls if signature(c) == "gcloud container node-pools create gpu-gb200")
    assert flags(pool_call)["accelerator-network-profile"] == "auto"
    [quota_call] = [c for c in run.calls if signature(c) == "kubectl apply" and "ResourceQuota" in c.get("stdin", "")]
    assert yaml.safe_load(quota_call["stdin"])["spec"]["hard"] == {"pods": "7"}  # 3 nodes
    assert _helm_install(run)["rc"] == 0


def test_with_dra_claims_kueue_maps_their_device_classes_and_the_queue_gives_quota_for_them(scripts, cloud):
    """Kueue from 0.18 holds a workload whose claims name an unmapped DeviceClass (kueue v0.19.2
    pkg/dra/claims.go): the script adds generator/gke/kueue_dra.py's mappings to Kueue's own
    configuration (keeping what is there), restarts Kueue, and quotas each class per GPU node."""
    run = cloud.run(scripts["gb200-standard-dranet-kueue"], env=DRANET_GKE)
    assert run.rc == 0, run.stderr
    [cm_call] = [c for c in run.calls if signature(c) == "kubectl apply" and "kind: ConfigMap" in c.get("stdin", "")]
    cm = yaml.safe_load(cm_call["stdin"])
    assert cm["metadata"] == {"name": "kueue-manager-config", "namespace": "kueue-system"}
    config = yaml.safe_load(cm["data"]["controller_manager_config.yaml"])
    assert config["webhook"] == {"port": 9443}  # Kueue's own configuration kept
    assert config["resources"] == kueue_dra.configuration()
    order = run.mutations
    restart = order.index("kubectl rollout restart deployment/kueue-controller-manager")
    assert order.index("kubectl apply") < restart  # the manifests, then the configuration
    [queue_call] = [c for c in run.calls if signature(c) == "kubectl apply" and "kind: ClusterQueue" in c.get("stdin", "")]
    assert run.calls.index(cm_call) < run.calls.index(queue_call)
    cq = next(d for d in yaml.safe_load_all(queue_call["stdin"]) if d["kind"] == "ClusterQueue")
    [group] = cq["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/compute-domain-channel", "google.com/mrdma"]
    quota = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"]}
    assert quota["cpu"]["nvidia.com/compute-domain-channel"] == "0" and quota["cpu"]["google.com/mrdma"] == "0"
    assert quota["gb200-reservation-a4x-r1"]["nvidia.com/compute-domain-channel"] == "3"  # 3 nodes, one channel each
    assert quota["gb200-reservation-a4x-r1"]["google.com/mrdma"] == "12"  # and their 4 NICs each

    again = cloud.run(scripts["gb200-standard-dranet-kueue"], env=DRANET_GKE)
    assert again.rc == 0 and not [m for m in again.mutations if "rollout" in m or "ConfigMap" in m], again.mutations


def test_a_kueue_configuration_with_its_own_resources_block_stops_naming_the_mappings(scripts, cloud):
    cloud.run(scripts["gb200-standard-dranet-kueue"], env=DRANET_GKE)
    key = "k8s/kueue-system/configmap/kueue-manager-config"
    state = marshal.loads(cloud.state.read_bytes())  # noqa: S302 - the fake's own state file
    state["resources"][key] = {"data": "kind: Configuration\nresources:\n  excludeResourcePrefixes: []\n"}
    cloud.state.write_bytes(marshal.dumps(state))
    run = cloud.run(scripts["gb200-standard-dranet-kueue"], env=DRANET_GKE)
    assert run.rc == 1
    assert "has a resources block of its own: add to it deviceClassMappings (nvidia.com/compute-domain-channel:" in run.stderr


def test_machines_without_dra_claims_leave_kueues_configuration_alone(scripts):
    text = scripts["h200-standard-scale-out"].read_text()
    assert "deviceClassMappings" not in text and "rollout restart" not in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--reservation: a4x-highgpu-4g (gb200) nodes come from a reservation (Google Cloud, AI Hypercomputer"),
        (["--provisioning", "spot"], "--provisioning: a4x-highgpu-4g (gb200) is offered as reservation only, not spot"),
        (["--provisioning", "flex-start"], "--provisioning: a4x-highgpu-4g (gb200) is offered as reservation only, not flex-start"),
        (["--groups", "a=2:reservation:r1,b=2:spot"], "--groups: a4x-highgpu-4g (gb200) is offered as reservation only, not spot"),
        (["--groups", "a=2"], "--groups: group a: a4x-highgpu-4g (gb200) nodes come from a reservation (Google Cloud"),
    ],
)
def test_a4x_is_obtained_by_reservation_only(tmp_path, capsys, args, message):
    # The profile row's provisioning decides (AI Hypercomputer "Consumption options": flex-start and
    # Spot serve any GPU machine except A4X): the default is a reservation, which must be named.
    rc = cli.main(["infra", *BASE, "--gpu", "gb200", *args, "-o", str(tmp_path / "s.sh")])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert "consumption-models" in err
    assert not (tmp_path / "s.sh").exists()


def test_a4x_by_default_makes_a_reservation_pool(scripts):
    text = scripts["gb200-standard"].read_text()
    assert "--reservation-affinity=specific" in text and "--spot" not in text
