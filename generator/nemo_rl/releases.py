"""NeMo RL releases the chart supports, one row each: image tag, Ray inside the image, entry point,
data keys, what its start-up enforces, and the commit of its configs carried in vendor/nemo-rl/.

Adding a release is one row here plus its configs (`scripts/vendor.sh refresh FOLDER`, which reads
the commit from this row) and `scripts/sync.sh` (the schema's and docs' release lists, the
examples); everything else reads the table."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NemoRlRelease:
    tag: str
    ray_version: str
    entrypoint: str
    # "flat": data.dataset_name + data.train_data_path (v0.5.0); "nested": data.train.* (v0.6.0+)
    data_layout: str
    # v0.5.0/v0.6.0 reserve one CPU on every Ray node (head included) to build virtualenvs;
    # a head with 0 Ray CPUs blocks that reservation forever (fixed in v0.7.0).
    head_needs_cpu: bool
    # v0.6.0+: with TP >= 4, train_micro_batch_size must equal logprob_batch_size.
    tp_micro_logprob_rule: bool
    # v0.7.0 has cluster.segment_size (its base config sets null: no NVLink-segment alignment).
    has_segment_size: bool
    # v0.7.0's grpo.setup asserts "Non-colocated mode requires train_nodes > 0 and inference_nodes > 0";
    # v0.5.0 and v0.6.0 build an empty training cluster and fail later.
    asserts_training_nodes: bool
    # grpo.async_grpo (examples/run_grpo*.py calls async_grpo_train when grpo.async_grpo.enabled):
    # present at v0.5.0, v0.6.0 and v0.7.0 (nemo_rl/algorithms/grpo.py async_grpo_train).
    has_async_grpo: bool
    # The NVIDIA-NeMo/RL commit the release's tag points at: its configs under vendor/nemo-rl/<tag>/.
    commit: str


RELEASES: dict[str, NemoRlRelease] = {
    r.tag: r
    for r in (
        NemoRlRelease(
            "v0.5.0",
            "2.49.2",
            "examples/run_grpo_math.py",
            "flat",
            True,
            False,
            False,
            False,
            True,
            "6c7089300fded94abfa49bb9cbf9eb357d862461",
        ),
        NemoRlRelease(
            "v0.6.0",
            "2.54.0",
            "examples/run_grpo.py",
            "nested",
            True,
            True,
            False,
            False,
            True,
            "5fb588932bf835506a8a5bac01de4f8c7ab0a065",
        ),
        NemoRlRelease(
            "v0.7.0",
            "2.55.1",
            "examples/run_grpo.py",
            "nested",
            False,
            True,
            True,
            True,
            True,
            "81aa43dda4765b0429cf31dab44441e4e4383911",
        ),
    )
}

DEFAULT_RELEASE = "v0.7.0"
IMAGE_REPOSITORY = "nvcr.io/nvidia/nemo-rl"
CODE_DIR = "/opt/nemo-rl"


def release(tag: str) -> NemoRlRelease:
    try:
        return RELEASES[tag]
    except KeyError:
        raise ValueError(f"unknown NeMo RL release {tag!r}: choose one of {', '.join(RELEASES)}") from None
