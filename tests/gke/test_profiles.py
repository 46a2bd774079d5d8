"""The accelerator table and the node-allocatable arithmetic."""

import pytest

from generator.gke.profiles import PROFILES, profile
from generator.gke.sizing import allocatable, gib, parse_quantity, usable, worker_sizing


def test_profiles_hold_the_documented_machine_facts():
    b, h = profile("b200"), profile("h200")
    assert (b.machine_type, b.node_label, b.min_gke_version) == ("a4-highgpu-8g", "nvidia-b200", "1.32.4-gke.1236000")
    assert (h.machine_type, h.node_label, h.min_gke_version) == ("a3-ultragpu-8g", "nvidia-h200-141gb", "1.31.7-gke.1265000")
    assert b.nccl_tuner_config_path.endswith("tuner_config_a4.txtpb")
    assert h.nccl_tuner_config_path.endswith("tuner_config_a3u.txtpb")
    assert all(p.gpus_per_node == 8 and p.rdma_nics == 8 and p.cpu_arch == "amd64" for p in (b, h))
    assert not (b.compute_domain or h.compute_domain) and b.autopilot and h.autopilot


def test_a4x_row_holds_the_documented_facts():
    """container-engine-accelerators gpudirect-rdma/nccl-test-imex-a4x.yaml and nccl-rdma-installer-a4x.yaml."""
    g = profile("gb200")
    assert (g.machine_type, g.node_label, g.gpus_per_node, g.rdma_nics) == ("a4x-highgpu-4g", "nvidia-gb200", 4, 4)
    assert (g.cpu_arch, g.gib_installer) == ("arm64", "nccl-rdma-installer-a4x.yaml")
    assert g.nccl_tuner_config_path == ""  # no public A4X tuner file: gIB's set_nccl_env.sh chooses
    assert g.compute_domain and not g.autopilot and g.dranet
    assert set(PROFILES) == {"b200", "h200", "gb200"}


def test_unknown_accelerator_is_a_clear_error():
    with pytest.raises(ValueError, match="choose one of b200, h200, gb200"):
        profile("a100")


@pytest.mark.parametrize(("gpu", "cpu", "mem"), [("h200", 223.4, 2886), ("b200", 223.4, 3882)])
def test_allocatable_matches_gke_reservation_formula(gpu, cpu, mem):
    a = allocatable(profile(gpu))
    assert a.cpu == pytest.approx(cpu, abs=0.05)
    assert a.memory_gib == pytest.approx(mem, abs=1)


@pytest.mark.parametrize("gpu", ["h200", "b200"])
def test_worker_sizing_fits_the_node_with_shm(gpu):
    p = profile(gpu)
    s = worker_sizing(p)
    u = usable(p)
    assert s.cpu <= u.cpu
    assert s.memory_request_gib + s.shm_gib <= u.memory_gib
    assert s.memory_limit_gib == s.memory_request_gib + s.shm_gib
    # Well below the host figures the public charts mistook for capacity.
    assert s.memory_request_gib < p.host_memory_gib - 300


@pytest.mark.parametrize(
    ("text", "value"),
    [("2400Gi", 2400 * 2**30), ("500m", 0.5), ("8", 8), (8, 8), ("1.5Gi", 1.5 * 2**30), ("1e3", 1000), ("2k", 2000)],
)
def test_parse_quantity(text, value):
    assert float(parse_quantity(text)) == pytest.approx(value)


@pytest.mark.parametrize("bad", ["", "Gi", "12 Gi", "1.2.3", "-5", "1e3Gi", True, "5x"])
def test_parse_quantity_rejects(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_gib():
    assert gib("240Gi") == 240
    assert gib("1024Mi") == 1


@pytest.mark.parametrize("gpu", ["b200", "h200"])
def test_each_ray_object_store_fits_its_pods_dev_shm(gpu, monkeypatch):
    # Ray's own sizing (30% of the pod's memory, capped near /dev/shm but never under 10 GB); an
    # object store larger than /dev/shm goes to /tmp, the container's disk. /dev/shm here is the
    # pod's, the one thing this machine cannot have.
    from ray._private import utils as ray_utils

    from generator.values.build import Options, build

    values = build(Options(gpu=gpu))
    for role in ("head", "worker"):
        shm = int(parse_quantity(values[role]["shmSize"]))
        memory = int(parse_quantity(values[role]["resources"]["limits"]["memory"]))
        monkeypatch.setattr(ray_utils, "get_shared_memory_bytes", lambda shm=shm: shm)
        assert ray_utils.resolve_object_store_memory(memory) <= shm, role
