"""Stand-in for `gcloud`, `kubectl` and `helm` in the infra script tests (stdlib only).

Called as `fake_cloud.py gcloud|kubectl|helm ARGS...` by the wrappers beside it. It keeps a small
model of a Google Cloud project in a JSON file ($FAKE_STATE): a resource exists once a create
made it, so a `describe`/`get` answers "not found" (exit 1) before the first run's create and
"found" afterwards. Creates of something that exists, deletes of something missing and
out-of-order operations (a subnet before its VPC, kubectl before get-credentials, a VPC deleted
while subnets use it) fail like the real tools. Every call is appended to $FAKE_LOG as one line
holding a Python literal: {"tool", "argv", "mutating", "rc"}. With FAKE_FAIL_AT=k the k-th
mutating call logged to the current $FAKE_LOG fails (exit 1).

The script under test passes flags as --name=value; -f, -n and -o take the next word (kubectl).
`describe --format=value(description)`, `value(mtu)` and `value(resourceLabels.K)` /
`value(labels.K)` answer from the flags the resource was created with (the teardown's ownership
check). `compute regions describe --filter=quotas.metric=M` answers the GPU quota from
$FAKE_GPU_QUOTA ("LIMIT USAGE"; "none": the metric is not shown; unset: 512 free). `kubectl apply
-f -` reads the manifests from stdin, logged as "stdin", and records each object by kind and name.
`helm status|install RELEASE ... --namespace=NS` answer from and record a release (installed into
an existing namespace only, after get-credentials); `--values=-` is read from stdin and logged.
`clusters describe --format=value(currentMasterVersion)` answers the version the cluster was created with.
Only built-in modules are imported (the state file is `marshal`ed): a run of the bring-up
script makes ~50 calls, and each one starts a Python interpreter.
"""

from __future__ import annotations

import marshal
import os
import sys

MUTATING = {"create", "create-auto", "delete", "enable", "connect", "update", "apply"}
VERBS = MUTATING | {"describe", "list", "get", "get-credentials", "get-server-config"}
KUBECTL_MUTATING = {"create", "apply", "delete", "label", "set", "rollout"}
# The head of Kueue's release configuration (config/components/manager/controller_manager_config.yaml).
KUEUE_CONFIG = "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nwebhook:\n  port: 9443\n"
HELM_MUTATING = {"install", "upgrade", "uninstall"}
DEFAULT_NETWORK = {"subnet-mode": "auto", "mtu": "1460"}  # a project's default VPC (made by Google, no mark)
PROJECT_NUMBER = "123456789012"
LUSTRE_MOUNT_POINT = "10.90.0.5@tcp:/lfs"
RANGE_CIDR = "10.90.0.0/20"
INSTALLER_NAMESPACE = {True: "rdma-system", False: "kube-system"}  # autopilot manifest or not


class Fail(Exception):
    pass


def parse(args: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    words: list[str] = []
    flags: list[tuple[str, str]] = []
    it = iter(args)
    for a in it:
        if a in ("-f", "-n", "-o"):
            flags.append((a, next(it)))
        elif a.startswith("--"):
            key, _, value = a[2:].partition("=")
            flags.append((key, value))
        else:
            words.append(a)
    return words, flags


def flag(flags: list[tuple[str, str]], key: str) -> str:
    for k, v in flags:
        if k == key:
            return v
    return ""


class Cloud:
    def __init__(self, state: dict) -> None:
        self.res: dict[str, dict] = state.setdefault("resources", {"compute/networks/default": dict(DEFAULT_NETWORK)})
        self.state = state

    def need(self, key: str, what: str) -> None:
        if key not in self.res:
            raise Fail(f"ERROR: NOT_FOUND: {what} {key.rsplit('/', 1)[-1]} does not exist")

    # --- gcloud ---------------------------------------------------------------------------
    def gcloud(self, words: list[str], flags: list[tuple[str, str]]) -> str:
        verb_at = next(i for i, w in enumerate(words) if w in VERBS)
        kind, verb, rest = "/".join(words[:verb_at]), words[verb_at], words[verb_at + 1 :]
        if kind == "services" and verb == "list":
            return "".join(f"{k.split('/', 1)[1]}\n" for k in self.res if k.startswith("api/"))
        if kind == "services" and verb == "enable":
            for api in rest:
                self.res[f"api/{api}"] = {}
            return ""
        if kind == "services/vpc-peerings":
            return self.peering(verb, flags)
        if kind == "projects" and verb == "describe":
            return PROJECT_NUMBER + "\n"
        if kind == "compute/regions" and verb == "describe":
            return self.quota()
        if kind == "compute/networks/subnets" and verb == "list":
            return self.subnets(flag(flags, "network"), flag(flags, "regions"))
        if kind == "container" and verb == "get-server-config":
            return os.environ.get("FAKE_GKE_VERSION", "1.33.5-gke.1080000") + "\n"
        if kind == "container/clusters" and verb == "get-credentials":
            self.need(f"container/clusters/{rest[0]}", "cluster")
            self.state["kubeconfig"] = rest[0]
            return ""
        name = rest[0]
        key = f"{kind}/{name}"
        if verb == "describe":
            self.need(key, kind)
            return self.describe(kind, name, flag(flags, "format"))
        if verb in ("create", "create-auto"):
            if key in self.res:
                raise Fail(f"ERROR: ALREADY_EXISTS: {kind} {name} already exists")
            self.check_create(kind, flags)
            self.res[key] = {k: v for k, v in flags if k != "additional-node-network"}
            return ""
        if verb == "delete":
            self.need(key, kind)
            self.check_delete(kind, name)
            del self.res[key]
            if kind == "container/clusters":
                for k in [k for k in self.res if k.startswith("container/node-pools/") or k.startswith("k8s/")]:
                    del self.res[k]
                self.state.pop("kubeconfig", None)
            return ""
        raise Fail(f"fake gcloud: unsupported command {' '.join(words)}")

    def quota(self) -> str:
        given = os.environ.get("FAKE_GPU_QUOTA", "512 0")
        if given == "none":
            return ""
        limit, usage = given.split()
        return f"{limit}.0\t{usage}.0\n"

    def subnets(self, network: str, region: str) -> str:
        if self.res.get(f"compute/networks/{network}", {}).get("subnet-mode") == "auto":
            return f"{network}\n"  # an auto-mode VPC has a subnet in every region
        names = [k.rsplit("/", 1)[1] for k, v in self.res.items() if k.startswith("compute/networks/subnets/")]
        return "".join(
            f"{n}\n"
            for n in names
            if self.res[f"compute/networks/subnets/{n}"].get("network") == network
            and self.res[f"compute/networks/subnets/{n}"].get("region") == region
        )

    def describe(self, kind: str, name: str, fmt: str) -> str:
        stored = self.res[f"{kind}/{name}"]
        if fmt in ("value(description)", "value(mtu)"):
            return stored.get(fmt[6:-1], "") + "\n"
        if fmt.startswith(("value(resourceLabels.", "value(labels.")):
            want = fmt.split(".", 1)[1][:-1]
            labels = dict(kv.split("=", 1) for kv in stored.get("labels", "").split(",") if kv)
            return labels.get(want, "") + "\n"
        if fmt == "value(currentMasterVersion)":
            return stored.get("cluster-version", "") + "\n"
        if kind == "lustre/instances":
            return LUSTRE_MOUNT_POINT + "\n" if fmt == "value(mountPoint)" else f"mountPoint: {LUSTRE_MOUNT_POINT}\nstate: ACTIVE\n"
        if kind == "compute/addresses" and fmt.startswith("value[separator=/]"):
            return RANGE_CIDR + "\n"
        return f"name: {name}\n"

    def check_create(self, kind: str, flags: list[tuple[str, str]]) -> None:
        if kind in ("compute/networks/subnets", "compute/firewall-rules", "compute/addresses"):
            self.need(f"compute/networks/{flag(flags, 'network')}", "network")
        if kind == "compute/networks" and flag(flags, "network-profile"):
            profile = flag(flags, "network-profile")
            if not profile.endswith("-vpc-roce"):
                raise Fail(f"ERROR: INVALID_ARGUMENT: network profile {profile}")
        if kind == "container/node-pools":
            self.need(f"container/clusters/{flag(flags, 'cluster')}", "cluster")
            self.check_autoscaling(flags)
            for k, v in flags:
                if k == "additional-node-network":
                    parts = dict(p.split("=", 1) for p in v.split(","))
                    self.need(f"compute/networks/{parts['network']}", "network")
                    self.need(f"compute/networks/subnets/{parts['subnetwork']}", "subnetwork")
        if kind == "lustre/instances":
            network = flag(flags, "network").rsplit("/", 1)[-1]
            if not self.res.get(f"peering/{network}", {}).get("ranges"):
                raise Fail(f"ERROR: FAILED_PRECONDITION: network {network} has no private services access")

    def check_autoscaling(self, flags: list[tuple[str, str]]) -> None:
        """The node-pool sizing rules of GKE's documentation (the messages are this fake's own):
        https://docs.cloud.google.com/kubernetes-engine/docs/concepts/cluster-autoscaler and
        https://docs.cloud.google.com/kubernetes-engine/docs/how-to/cluster-autoscaler"""
        given = {k for k, _ in flags}
        autoscaled = "enable-autoscaling" in given
        bounds = {"min-nodes", "max-nodes", "total-min-nodes", "total-max-nodes"} & given
        if bounds and not autoscaled:
            raise Fail(f"ERROR: INVALID_ARGUMENT: --{sorted(bounds)[0]} needs --enable-autoscaling")
        if {"min-nodes", "max-nodes"} & given and {"total-min-nodes", "total-max-nodes"} & given:
            raise Fail("ERROR: INVALID_ARGUMENT: --total-min/max-nodes and --min/max-nodes are mutually exclusive")
        if "total-min-nodes" in given and "total-max-nodes" in given:
            low, high = int(flag(flags, "total-min-nodes")), int(flag(flags, "total-max-nodes"))
            if not 0 <= low <= high:
                raise Fail(f"ERROR: INVALID_ARGUMENT: total node bounds {low}..{high}")
        policy = flag(flags, "location-policy")
        if policy == "ANY" and not (autoscaled and flag(flags, "num-nodes") == "0"):
            raise Fail("ERROR: INVALID_ARGUMENT: location policy ANY needs --enable-autoscaling and --num-nodes=0")
        if policy == "BALANCED" and "flex-start" in given:
            raise Fail("ERROR: INVALID_ARGUMENT: location policy BALANCED is not supported with --flex-start")

    def check_delete(self, kind: str, name: str) -> None:
        if kind == "compute/networks":
            users = [k for k, v in self.res.items() if v.get("network") == name and not k.startswith("peering/")]
            if users:
                raise Fail(f"ERROR: RESOURCE_IN_USE: network {name} is used by {users[0]}")
        if kind == "compute/addresses":
            for k, v in self.res.items():
                if k.startswith("peering/") and name in v.get("ranges", []):
                    raise Fail(f"ERROR: RESOURCE_IN_USE: address {name} is used by {k}")

    def peering(self, verb: str, flags: list[tuple[str, str]]) -> str:
        key = f"peering/{flag(flags, 'network')}"
        if verb == "list":
            return "".join(f"{r}\n" for r in self.res.get(key, {}).get("ranges", []))
        if verb == "delete":
            self.need(key, "connection")
            del self.res[key]
            return ""
        ranges = flag(flags, "ranges").split(",")
        for r in ranges:
            self.need(f"compute/addresses/{r}", "address")
        if verb == "connect" and key in self.res:
            raise Fail("ERROR: Cannot modify allocated ranges in CreateConnection. Please use UpdateConnection.")
        if verb == "update":
            self.need(key, "connection")
        self.res[key] = {"network": flag(flags, "network"), "ranges": ranges}
        return ""

    # --- kubectl --------------------------------------------------------------------------
    def kubectl(self, words: list[str], flags: list[tuple[str, str]], stdin: str = "") -> str:
        cluster = self.state.get("kubeconfig")
        if not cluster or f"container/clusters/{cluster}" not in self.res:
            raise Fail("The connection to the server localhost:8080 was refused - did you specify the right host or port?")
        ns = flag(flags, "namespace") or flag(flags, "-n") or "default"
        verb = words[0]
        if verb == "apply":
            return self.apply(flag(flags, "-f"), stdin)
        if verb == "wait":
            self.need_k8s(words[1], ns)
            return ""
        if verb == "rollout":  # rollout restart|status deployment/NAME
            self.need_k8s(words[2], ns)
            return ""
        if verb == "set":  # set image daemonset/NAME CONTAINER=IMAGE
            kind, name = words[2].split("/", 1)
            key = f"k8s/{ns}/{kind}/{name}"
            self.need(key, kind)
            self.res[key]["image"] = words[3].split("=", 1)[1]
            return ""
        kind, name = words[1], words[2]
        key = self.key(kind, name, ns)
        exists = key in self.res or key in ("k8s/namespace/default", "k8s/namespace/kube-system")
        if verb == "label":
            if not exists:
                raise Fail(f'Error from server (NotFound): {kind}s "{name}" not found')
            self.res.setdefault(key, {}).setdefault("labels", {}).update(dict(w.split("=", 1) for w in words[3:]))
            return ""
        if verb == "get":
            if not exists:
                raise Fail(f'Error from server (NotFound): {kind}s "{name}" not found')
            out = flag(flags, "-o")
            if out.startswith("jsonpath={.metadata.labels."):
                label = out[len("jsonpath={.metadata.labels.") : -1].replace("\\.", ".")
                return self.res.get(key, {}).get("labels", {}).get(label, "")
            if out.startswith("jsonpath={.data."):  # a ConfigMap's one key: its manifest as applied, or Kueue's own
                return self.res[key].get("manifest") or self.res[key].get("data", "")
            return f"{name}\n"
        if verb == "create":
            if exists:
                raise Fail(f'Error from server (AlreadyExists): {kind}s "{name}" already exists')
            if kind != "namespace" and f"k8s/namespace/{ns}" not in self.res and ns not in ("default", "kube-system"):
                raise Fail(f'Error from server (NotFound): namespaces "{ns}" not found')
            self.res[key] = {}
            return ""
        raise Fail(f"fake kubectl: unsupported command {' '.join(words)}")

    # --- helm ---------------------------------------------------------------------------------
    def helm(self, words: list[str], flags: list[tuple[str, str]], stdin: str = "") -> str:
        cluster = self.state.get("kubeconfig")
        if not cluster or f"container/clusters/{cluster}" not in self.res:
            raise Fail("Error: Kubernetes cluster unreachable")
        ns = flag(flags, "namespace") or "default"
        verb, release = words[0], words[1]
        key = f"k8s/{ns}/helmrelease/{release}"
        if verb == "status":
            self.need(key, "release")
            return f"NAME: {release}\nSTATUS: deployed\n"
        if verb == "install":
            if key in self.res:
                raise Fail("Error: INSTALLATION FAILED: cannot re-use a name that is still in use")
            if f"k8s/namespace/{ns}" not in self.res:
                raise Fail(f'Error: INSTALLATION FAILED: create: failed to create: namespaces "{ns}" not found')
            self.res[key] = {"chart": words[2], "version": flag(flags, "version"), "values": stdin}
            return ""
        raise Fail(f"fake helm: unsupported command {' '.join(words)}")

    @staticmethod
    def key(kind: str, name: str, ns: str) -> str:
        if kind in ("namespace", "clusterqueue", "resourceflavor", "topology"):
            return f"k8s/{kind}/{name}"
        return f"k8s/{ns}/{kind}/{name}"

    def need_k8s(self, ref: str, ns: str) -> None:
        kind, name = ref.split("/", 1)
        self.need(self.key(kind, name, ns), kind)

    def apply(self, source: str, stdin: str) -> str:
        if source == "-":
            import re  # only here: most calls need no more than the built-in modules

            for doc in stdin.split("\n---\n"):
                kind = re.search(r"^kind: (\S+)$", doc, re.M)
                name = re.search(r"^  name: (\S+)$", doc, re.M)
                ns = re.search(r"^  namespace: (\S+)$", doc, re.M)
                if not kind or not name:
                    raise Fail("error: error validating data: kind or metadata.name not set")
                self.res[self.key(kind.group(1).lower(), name.group(1), ns.group(1) if ns else "default")] = {"manifest": doc}
            return ""
        if "/kueue/releases/" in source:
            self.res["k8s/namespace/kueue-system"] = {}
            self.res["k8s/kueue-system/deployment/kueue-controller-manager"] = {"url": source}
            self.res["k8s/kueue-system/configmap/kueue-manager-config"] = {"data": KUEUE_CONFIG}
            return ""
        installer_ns = INSTALLER_NAMESPACE["autopilot" in source]
        self.res[f"k8s/namespace/{installer_ns}"] = {}
        self.res[f"k8s/{installer_ns}/daemonset/nccl-rdma-installer"] = {"url": source}
        return ""


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    state_path, log_path = os.environ["FAKE_STATE"], os.environ["FAKE_LOG"]
    words, flags = parse(args)
    verbs = {"kubectl": KUBECTL_MUTATING, "helm": HELM_MUTATING}
    mutating = bool(set(words) & MUTATING) if tool == "gcloud" else bool(words) and words[0] in verbs[tool]
    entry = {"tool": tool, "argv": args, "mutating": mutating, "rc": 0}
    stdin = sys.stdin.read() if ("-f", "-") in flags or ("values", "-") in flags else ""
    if stdin:
        entry["stdin"] = stdin
    try:
        with open(state_path, "rb") as f:
            state = marshal.load(f)  # noqa: S302 - this fake's own state file
    except FileNotFoundError:
        state = {}
    counts = state.setdefault("mutating_calls", {})
    if mutating:
        counts[log_path] = counts.get(log_path, 0) + 1
    fail_at = int(os.environ.get("FAKE_FAIL_AT") or 0)
    out, err = "", ""
    if mutating and counts[log_path] == fail_at:
        entry["rc"], err = 1, f"ERROR: ({tool}) injected failure at mutating call {fail_at}\n"
    else:
        try:
            cloud = Cloud(state)
            if tool == "gcloud":
                out = cloud.gcloud(words, flags)
            elif tool == "helm":
                out = cloud.helm(words, flags, stdin)
            else:
                out = cloud.kubectl(words, flags, stdin)
        except Fail as e:
            entry["rc"], err = 1, f"{e}\n"
    with open(state_path, "wb") as f:
        marshal.dump(state, f)
    with open(log_path, "a") as f:
        f.write(repr(entry) + "\n")
    sys.stdout.write(out)
    sys.stderr.write(err)
    return entry["rc"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
