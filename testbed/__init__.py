"""The test bed: a real Kubernetes control plane, kwok, the KubeRay operator and Kueue, built from
their Go modules and run as processes on 127.0.0.1, with simulated GKE node pools.

Contributor tooling, not part of the product: `scripts/testbed.sh up|down|env|build` and the
session fixture of the cluster lane (`tests/testbed/`) drive it. Nothing in it sends a packet to
anything but 127.0.0.1: pod and Service addresses of its clusters are data only.

- `components.py`: what is built, from which wrapper module (`testbed/go/<folder>/go.mod`, the
  one place each version is pinned), into which binaries.
- `toolchain.py`, `build.py`: the Go toolchain and the builds (Go's caches make a rebuild a link).
- `pki.py`: the CA, serving and client certificates, the service-account key, the tokens.
- `processes.py`: starting, waiting on and stopping the processes, by PID, recorded in a state file.
- `nodes.py`: the simulated GKE nodes, from the generator's accelerator and provisioning tables.
- `control_plane.py`, `operators.py`: the flags of each component.
- `bed.py`: one test bed (etcd, then one cluster per KubeRay version), up and down.
"""
