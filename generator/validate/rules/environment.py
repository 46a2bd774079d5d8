"""Environment variables known to break the run, in extraEnv (head and workers) and nccl.extraEnv,
and a /dev/shm size given without a unit.

Judges, each read at the source named:
- Ray finds a node's GPUs through CUDA_VISIBLE_DEVICES when it is set (ray-project/ray,
  python/ray/_private/accelerators/nvidia_gpu.py NvidiaGPUAcceleratorManager
  get_current_process_visible_accelerator_ids; Ray's test of it counts 3 GPUs for "0,1,2").
- vLLM's sleep mode allocator asserts `"expandable_segments:True" not in PYTORCH_CUDA_ALLOC_CONF`
  (vllm-project/vllm, vllm/device_allocator/cumem.py CuMemAllocator.__init__), and NeMo RL builds
  every vLLM engine with enable_sleep_mode=True (nemo_rl/models/generation/vllm/vllm_worker.py,
  v0.5.0 to v0.7.0, vendor/nemo-rl-src/); PyTorch accepts only True or False after
  expandable_segments (pytorch/pytorch, c10/cuda/CUDAAllocatorConfig.cpp: "Expected a single
  True/False argument for expandable_segments").
- The Hugging Face cache: the chart sets HF_HOME to storage.hfHome on the shared volume, where the
  preparation Job downloads the model once; a cache variable pointing elsewhere makes every pod
  download again (or, offline, find nothing).
- NCCL's documented switches (docs.nvidia.com/deeplearning/nccl, "Environment Variables"):
  NCCL_P2P_DISABLE, NCCL_P2P_LEVEL=LOC and NCCL_SHM_DISABLE take NVLink and shared memory away from the 8 GPUs of a
  node; NCCL_IB_DISABLE and NCCL_NET=Socket take the RDMA NICs away from gIB.
"""

from __future__ import annotations

from collections.abc import Iterator

from generator.gke.sizing import parse_quantity
from generator.validate.findings import Finding, error
from generator.validate.rules.context import Context

CACHE_VARS = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_DATASETS_CACHE")
SHM_FLOOR = 64 * 2**20  # Docker's default /dev/shm; below it Ray's object store and NCCL's shared memory fail
NCCL_OFF = {
    "NCCL_P2P_DISABLE": ("1", "NVLink peer-to-peer between the node's GPUs is off: every collective goes through host memory"),
    "NCCL_SHM_DISABLE": ("1", "shared-memory transport is off: intra-node traffic falls back to sockets"),
}
NCCL_NO_RDMA = {
    "NCCL_IB_DISABLE": ("1", "the RDMA NICs are off for NCCL: gIB falls back to TCP sockets over eth0"),
    "NCCL_NET": ("socket", "NCCL uses TCP sockets, not gIB over the RDMA NICs"),
}


def _entries(ctx: Context) -> list[tuple[str, str, str]]:
    """(values key, name, value) of every variable the user sets."""
    out = [(f"extraEnv[{i}]", str(e["name"]), str(e["value"])) for i, e in enumerate(ctx.values.get("extraEnv") or [])]
    nccl = (ctx.values.get("nccl") or {}).get("extraEnv") or {}
    out += [(f"nccl.extraEnv.{k}", str(k), str(v)) for k, v in nccl.items()]
    return out


def _cuda_visible(where: str, value: str, gpus: int) -> Iterator[Finding]:
    ids = [p.strip() for p in value.split(",") if p.strip()]
    want = ",".join(map(str, range(gpus)))
    if sorted(ids) == sorted(map(str, range(gpus))) and len(ids) == gpus:
        return
    yield error(
        where,
        f"CUDA_VISIBLE_DEVICES={value!r}: Ray counts the GPUs it lists ({len(set(ids))} usable of the node's {gpus}),"
        " so NeMo RL's placement groups never get the GPUs cluster.gpus_per_node asks for",
        f"remove it (Ray sets it per actor) or list all {gpus}: {want}",
    )


def _alloc_conf(where: str, value: str, vllm: bool) -> Iterator[Finding]:
    for option in value.split(","):
        name, _, arg = (p.strip() for p in option.partition(":"))
        if name != "expandable_segments":
            continue
        if arg not in ("True", "False"):
            yield error(
                where,
                f"PYTORCH_CUDA_ALLOC_CONF expandable_segments:{arg}: PyTorch accepts only True or False"
                " and stops at the first CUDA allocation",
                "write expandable_segments:False or remove it",
            )
        elif arg == "True" and vllm:
            yield error(
                where,
                "PYTORCH_CUDA_ALLOC_CONF expandable_segments:True: vLLM's sleep-mode allocator (always on in NeMo RL's vLLM workers)"
                " asserts it is absent, and generation never starts",
                "remove expandable_segments from PYTORCH_CUDA_ALLOC_CONF",
            )


def _cache(where: str, name: str, value: str, ctx: Context) -> Iterator[Finding]:
    mount, home = ctx.mount, str(ctx.values["storage"]["hfHome"]).rstrip("/")
    path = value.rstrip("/")
    if name == "HF_HOME" and path != home:
        yield error(
            where,
            f"HF_HOME={value}: the chart sets HF_HOME from storage.hfHome ({home}), where the preparation Job puts the model",
            "remove it and set storage.hfHome instead",
        )
    elif name != "HF_HOME" and not (path == mount or path.startswith(mount.rstrip("/") + "/")):
        yield error(
            where,
            f"{name}={value} is off the shared volume ({mount}): every Ray pod downloads the model again,"
            " and not what the preparation Job fetched",
            f"remove it, or point it under {home}",
        )


def _offline(ctx: Context, entries: list[tuple[str, str, str]]) -> Iterator[Finding]:
    prep = ctx.values.get("prepare") or {}
    if prep.get("enabled") and prep.get("downloadModel", True):
        return
    for where, name, value in entries:
        if name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") and value.strip().lower() in ("1", "true", "yes", "on"):
            yield error(
                where,
                f"{name}={value} while the preparation Job does not download the model: the workers may not fetch it and stop",
                "set prepare.enabled and prepare.downloadModel to true, or remove it",
            )


def _shm(ctx: Context) -> Iterator[Finding]:
    for who in ("head", "worker"):
        raw = (ctx.values.get(who) or {}).get("shmSize")
        if raw is None:
            continue
        try:
            size = parse_quantity(raw)
        except (ValueError, TypeError):
            continue
        if size < SHM_FLOOR:
            unit = " (a number without a unit is bytes)" if str(raw).strip().replace(".", "", 1).isdigit() else ""
            yield error(
                f"{who}.shmSize",
                f"{raw} is {int(size)} bytes{unit}: /dev/shm this small fails Ray's object store and NCCL's shared memory",
                "give a unit, e.g. 12Gi",
            )


def check(ctx: Context) -> Iterator[Finding]:
    entries = _entries(ctx)
    vllm = str(ctx.get("policy.generation.backend", "vllm")) == "vllm"
    seen: dict[str, str] = {}
    for where, name, value in entries:
        if where.startswith("extraEnv["):
            if name in seen:
                yield error(where, f"{name} is set twice in extraEnv ({seen[name]} too): Kubernetes keeps the last one", "keep one")
            seen.setdefault(name, where)
        if name == "CUDA_VISIBLE_DEVICES":
            yield from _cuda_visible(where, value, ctx.gpus_per_node)
        elif name == "PYTORCH_CUDA_ALLOC_CONF":
            yield from _alloc_conf(where, value, vllm)
        elif name in CACHE_VARS:
            yield from _cache(where, name, value, ctx)
        elif name == "NCCL_P2P_LEVEL" and value.strip().upper() in ("LOC", "0"):
            yield error(where, f"{name}={value}: {NCCL_OFF['NCCL_P2P_DISABLE'][1]}", "remove it")
        elif name in NCCL_OFF and value.strip() == NCCL_OFF[name][0]:
            yield error(where, f"{name}={value}: {NCCL_OFF[name][1]}", "remove it")
        elif name in NCCL_NO_RDMA and ctx.gib and value.strip().lower() == NCCL_NO_RDMA[name][0]:
            yield error(
                where,
                f"{name}={value}: {NCCL_NO_RDMA[name][1]} (network.mode {ctx.values['network']['mode']})",
                "remove it, or use network.mode: tcp",
            )
    yield from _offline(ctx, entries)
    yield from _shm(ctx)
