"""Kubernetes' Pod Security Standards, as the admission controller checks them, over a pod's
metadata and spec (plain dicts, as rendered).

Written from the definitions in k8s.io/pod-security-admission, package `policy`
(https://github.com/kubernetes/pod-security-admission, commit 8f84a87c7f617f64a4ddc1aea24aeeb7a2e07cb8,
2026-07-01), at the newest version of each check (Kubernetes 1.37): one function per check, named
by its ID there (`check_<ID>.go`), returning the reason it forbids the pod or None. No library on
PyPI implements these checks; PyPI has no port of the Go package. Where the Go code differs by
version, the newest version is taken; where a restricted check overrides a baseline one
(`OverrideCheckIDs`), `violations` leaves the overridden one out, as the admission code does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Pod = dict[str, Any]  # the pod's spec
Meta = dict[str, Any]  # the pod's metadata
Check = Callable[[Meta, Pod], str | None]

# check_capabilities_baseline.go: capabilities_allowed_1_0
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# check_sysctls.go: sysctlsAllowedV1Dot37 (the union of the 1.0, 1.27, 1.29, 1.32 and 1.37 sets)
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
        "net.ipv4.tcp_slow_start_after_idle",
        "net.ipv4.tcp_notsent_lowat",
    }
)
# check_seLinuxOptions.go: selinuxAllowedTypes1_31
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# check_restrictedVolumes.go: the inline volume sources the restricted level allows
RESTRICTED_VOLUME_SOURCES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image", "persistentVolumeClaim", "projected", "secret"}
)
VALID_SECCOMP = frozenset({"RuntimeDefault", "Localhost"})


def containers(spec: Pod) -> Iterator[dict[str, Any]]:
    """visitor.go visitContainers: init containers, containers, ephemeral containers."""
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(c: dict[str, Any]) -> dict[str, Any]:
    return c.get("securityContext") or {}


def _pod_sc(spec: Pod) -> dict[str, Any]:
    return spec.get("securityContext") or {}


def _names(cs: list[dict[str, Any]]) -> str:
    return ", ".join(repr(c["name"]) for c in cs)


def _user_namespace(spec: Pod) -> bool:
    """helpers.go relaxPolicyForUserNamespacePod: hostUsers: false."""
    return spec.get("hostUsers") is False


def _windows(spec: Pod) -> bool:
    return (spec.get("os") or {}).get("name") == "windows"


# --- baseline -----------------------------------------------------------------------------


def host_namespaces(meta: Meta, spec: Pod) -> str | None:
    on = [k for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    return f"host namespaces: {', '.join(on)}" if on else None


def privileged(meta: Meta, spec: Pod) -> str | None:
    bad = [c for c in containers(spec) if _sc(c).get("privileged")]
    return f"privileged: {_names(bad)}" if bad else None


def capabilities_baseline(meta: Meta, spec: Pod) -> str | None:
    added = {cap for c in containers(spec) for cap in (_sc(c).get("capabilities") or {}).get("add") or []}
    bad = sorted(added - BASELINE_CAPABILITIES)
    return f"non-default capabilities: {bad}" if bad else None


def host_path_volumes(meta: Meta, spec: Pod) -> str | None:
    bad = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    return f"hostPath volumes: {bad}" if bad else None


def host_ports(meta: Meta, spec: Pod) -> str | None:
    bad = sorted({p["hostPort"] for c in containers(spec) for p in c.get("ports") or [] if p.get("hostPort")})
    return f"hostPort: {bad}" if bad else None


def _bad_hosts(handler: dict[str, Any] | None) -> list[str]:
    handler = handler or {}
    return [h for key in ("httpGet", "tcpSocket") if (h := (handler.get(key) or {}).get("host"))]


def host_probes_and_host_lifecycle(meta: Meta, spec: Pod) -> str | None:
    bad = []
    for c in containers(spec):
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            bad += _bad_hosts(c.get(probe))
        for hook in ("postStart", "preStop"):
            bad += _bad_hosts((c.get("lifecycle") or {}).get(hook))
    return f"probe or lifecycle host: {sorted(set(bad))}" if bad else None


def app_armor_profile(meta: Meta, spec: Pod) -> str | None:
    types = [(_pod_sc(spec).get("appArmorProfile") or {}).get("type")]
    types += [(_sc(c).get("appArmorProfile") or {}).get("type") for c in containers(spec)]
    bad = [t for t in types if t is not None and t not in VALID_SECCOMP]
    prefix = "container.apparmor.security.beta.kubernetes.io/"
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith(prefix) and value and value != "runtime/default" and not value.startswith("localhost/"):
            bad.append(value)
    return f"forbidden AppArmor profiles: {bad}" if bad else None


def _selinux_ok(opts: dict[str, Any] | None) -> bool:
    if opts is None:
        return True
    return opts.get("type", "") in SELINUX_TYPES and not opts.get("user") and not opts.get("role")


def se_linux_options(meta: Meta, spec: Pod) -> str | None:
    bad = [] if _selinux_ok(_pod_sc(spec).get("seLinuxOptions")) else ["pod"]
    bad += [c["name"] for c in containers(spec) if not _selinux_ok(_sc(c).get("seLinuxOptions"))]
    return f"seLinuxOptions: {bad}" if bad else None


def proc_mount(meta: Meta, spec: Pod) -> str | None:
    """check_procMount_baseline.go, 1.35: any value in a user namespace."""
    if _user_namespace(spec):
        return None
    return _proc_mount(spec)


def _proc_mount(spec: Pod) -> str | None:
    bad = [c["name"] for c in containers(spec) if _sc(c).get("procMount") not in (None, "Default")]
    return f"procMount: {bad}" if bad else None


def seccomp_profile_baseline(meta: Meta, spec: Pod) -> str | None:
    bad = []
    pod_type = (_pod_sc(spec).get("seccompProfile") or {}).get("type")
    if pod_type is not None and pod_type not in VALID_SECCOMP:
        bad.append(f"pod={pod_type}")
    for c in containers(spec):
        t = (_sc(c).get("seccompProfile") or {}).get("type")
        if t is not None and t not in VALID_SECCOMP:
            bad.append(f"{c['name']}={t}")
    return f"seccompProfile: {bad}" if bad else None


def sysctls(meta: Meta, spec: Pod) -> str | None:
    bad = [s["name"] for s in _pod_sc(spec).get("sysctls") or [] if s["name"] not in SAFE_SYSCTLS]
    return f"forbidden sysctls: {bad}" if bad else None


def windows_host_process(meta: Meta, spec: Pod) -> str | None:
    scs = [_pod_sc(spec), *(_sc(c) for c in containers(spec))]
    return "hostProcess" if any((sc.get("windowsOptions") or {}).get("hostProcess") for sc in scs) else None


# --- restricted ---------------------------------------------------------------------------


def restricted_volumes(meta: Meta, spec: Pod) -> str | None:
    bad = [v["name"] for v in spec.get("volumes") or [] if not RESTRICTED_VOLUME_SOURCES & v.keys()]
    return f"restricted volume types: {bad}" if bad else None


def allow_privilege_escalation(meta: Meta, spec: Pod) -> str | None:
    if _windows(spec):
        return None
    bad = [c for c in containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False]
    return f"allowPrivilegeEscalation != false: {_names(bad)}" if bad else None


def run_as_non_root(meta: Meta, spec: Pod) -> str | None:
    if _user_namespace(spec):
        return None
    pod = _pod_sc(spec).get("runAsNonRoot")
    if pod is False:
        return "runAsNonRoot != true: pod"
    bad = [c for c in containers(spec) if _sc(c).get("runAsNonRoot") is False or (_sc(c).get("runAsNonRoot") is None and pod is not True)]
    return f"runAsNonRoot != true: {_names(bad)}" if bad else None


def run_as_user(meta: Meta, spec: Pod) -> str | None:
    if _user_namespace(spec):
        return None
    bad = ["pod"] if _pod_sc(spec).get("runAsUser") == 0 else []
    bad += [c["name"] for c in containers(spec) if _sc(c).get("runAsUser") == 0]
    return f"runAsUser=0: {bad}" if bad else None


def seccomp_profile_restricted(meta: Meta, spec: Pod) -> str | None:
    if _windows(spec):
        return None
    explicit = seccomp_profile_baseline(meta, spec)
    if explicit:
        return explicit
    pod_set = (_pod_sc(spec).get("seccompProfile") or {}).get("type") in VALID_SECCOMP
    bad = [c for c in containers(spec) if not pod_set and (_sc(c).get("seccompProfile") or {}).get("type") is None]
    return f"seccompProfile unset: {_names(bad)}" if bad else None


def capabilities_restricted(meta: Meta, spec: Pod) -> str | None:
    if _windows(spec):
        return None
    details = []
    missing = [c for c in containers(spec) if "ALL" not in ((_sc(c).get("capabilities") or {}).get("drop") or [])]
    if missing:
        details.append(f'must drop ["ALL"]: {_names(missing)}')
    added = sorted({cap for c in containers(spec) for cap in (_sc(c).get("capabilities") or {}).get("add") or []} - {"NET_BIND_SERVICE"})
    if added:
        details.append(f"must not add {added}")
    return "unrestricted capabilities: " + "; ".join(details) if details else None


def proc_mount_restricted(meta: Meta, spec: Pod) -> str | None:
    return _proc_mount(spec)


# ID -> check, as registered in the Go package; the restricted ones with the baseline IDs they override.
BASELINE: dict[str, Check] = {
    "hostNamespaces": host_namespaces,
    "privileged": privileged,
    "capabilities_baseline": capabilities_baseline,
    "hostPathVolumes": host_path_volumes,
    "hostPorts": host_ports,
    "hostProbesAndHostLifecycle": host_probes_and_host_lifecycle,
    "appArmorProfile": app_armor_profile,
    "seLinuxOptions": se_linux_options,
    "procMount": proc_mount,
    "seccompProfile_baseline": seccomp_profile_baseline,
    "sysctls": sysctls,
    "windowsHostProcess": windows_host_process,
}
RESTRICTED: dict[str, tuple[Check, tuple[str, ...]]] = {
    "restrictedVolumes": (restricted_volumes, ("hostPathVolumes",)),
    "allowPrivilegeEscalation": (allow_privilege_escalation, ()),
    "runAsNonRoot": (run_as_non_root, ()),
    "runAsUser": (run_as_user, ()),
    "seccompProfile_restricted": (seccomp_profile_restricted, ("seccompProfile_baseline",)),
    "capabilities_restricted": (capabilities_restricted, ("capabilities_baseline",)),
    "procMount_restricted": (proc_mount_restricted, ("procMount",)),
}
LEVELS = ("baseline", "restricted")


def violations(level: str, meta: Meta, spec: Pod) -> dict[str, str]:
    """{check ID: reason} of every check of `level` that forbids the pod."""
    if level not in LEVELS:
        raise ValueError(f"level {level!r}: choose baseline or restricted")
    checks = dict(BASELINE)
    if level == "restricted":
        for check_id, (check, overrides) in RESTRICTED.items():
            for old in overrides:
                checks.pop(old, None)
            checks[check_id] = check
    found = {check_id: check(meta, spec) for check_id, check in checks.items()}
    return {k: v for k, v in found.items() if v}
