"""The launcher's spec parser and small helpers (no Ray needed)."""

from __future__ import annotations

import json

import pytest
from conftest import load_chart_program

launcher = load_chart_program("launcher")
spec_of = load_chart_program("launcher_spec")
checkpoints = load_chart_program("launcher_checkpoints")
ray_side = load_chart_program("launcher_ray")

GOOD = {
    "address": "http://head-svc.ns.svc.cluster.local:8265",
    "submission_id": "nemo-rl-0123456789",
    "entrypoint": "python x.py",
    "expected_gpus": 16,
}


def test_minimal_spec_parses_with_defaults():
    s = spec_of.parse_spec(GOOD)
    assert s.follow is False and s.max_restarts == 0 and s.previous_runs == "wait"
    assert s.timeout("gpus_s", 7) == 7


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"entrypoint": None}, "entrypoint: expected str"),
        ({"expected_gpus": "16"}, "expected_gpus: expected int"),
        ({"expected_gpus": True}, "expected_gpus: expected int, got a boolean"),
        ({"follow": "yes"}, "follow: expected bool"),
        ({"address": "head:8265"}, "address:"),
        ({"address": "http://head:8265; rm -rf /"}, "address:"),
        ({"submission_id": "a b"}, "submission_id:"),
        ({"submission_id": "x" * 101}, "submission_id:"),
        ({"submission_id": "run-1\n"}, "submission_id:"),  # "$" alone matches before a final newline
        ({"address": "http://head:8265\n"}, "address:"),
        ({"ray_version": 2.55}, "ray_version: expected str"),
        ({"entrypoint": "python a.py\nrm -rf /"}, "entrypoint: must be one non-empty line"),
        ({"expected_gpus": 10**9}, "out of range"),
        ({"previous_runs": "kill"}, "previous_runs"),
        ({"timeouts": {"gpus": 3}}, "timeouts.gpus: unknown"),
        ({"timeouts": {"gpus_s": -1}}, "timeouts.gpus_s"),
        ({"wait_for_files": ["relative/marker"]}, "not an absolute path"),
        ({"checkpoint_dir": "results/grpo"}, "checkpoint_dir: 'results/grpo' must be an absolute path"),
        ({"checkpoint_dir": "/data/../etc"}, "checkpoint_dir: .* without '..'"),
        ({"metadata": {"a": 1}}, "metadata"),
        ({"token": "hf_abc"}, "unknown key 'token'"),
        ({"poll_interval_s": 0}, "poll_interval_s"),
    ],
)
def test_bad_specs_name_the_key(change, message):
    data = {**GOOD, **change}
    if change.get("entrypoint", 1) is None:
        del data["entrypoint"]
        message = "entrypoint: required key is missing"
    with pytest.raises(spec_of.SpecError, match=message):
        spec_of.parse_spec(data)


@pytest.mark.parametrize("text", ["", "[]", "{", '"x"', "\xff", "[" * 100000])
def test_unreadable_spec_files_exit_2_without_traceback(tmp_path, capsys, text):
    path = tmp_path / "s.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape") if text != "\xff" else b"\xff")
    assert launcher.main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "Traceback" not in err


def test_missing_spec_file(capsys):
    assert launcher.main(["/nonexistent/spec.json"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_attempt_ids_round_trip():
    base = "nemo-rl-0123456789"
    assert [spec_of.attempt_id(base, n) for n in (1, 2, 3)] == [base, f"{base}-retry1", f"{base}-retry2"]
    assert [spec_of.attempt_number(base, spec_of.attempt_id(base, n)) for n in (1, 2, 11)] == [1, 2, 11]
    assert spec_of.attempt_number(base, f"{base}-check-17") is None
    assert spec_of.attempt_number(base, "other") is None
    assert spec_of.attempt_number(base, None) is None


def test_latest_step_ignores_partial_and_stray_entries(tmp_path):
    assert checkpoints.latest_step(str(tmp_path / "missing")) is None
    for name in ("step_10", "step_2", "tmp_step_30", "step_x"):
        (tmp_path / name).mkdir()
    (tmp_path / "step_99").write_text("a file, not a checkpoint")
    assert checkpoints.latest_step(str(tmp_path)) == 10


def test_the_checkpoint_step_is_nemo_rls_own_record_when_it_can_be_read(tmp_path):
    (tmp_path / "step_8").mkdir()
    (tmp_path / "step_8" / "training_info.json").write_text('{"total_steps": 12, "current_step": 3}')
    (tmp_path / "step_9").mkdir()
    (tmp_path / "step_9" / "training_info.json").write_text("not json")
    assert checkpoints.checkpoint_step(str(tmp_path), 8) == 12
    assert checkpoints.checkpoint_step(str(tmp_path), 9) == 9  # unreadable: the folder's number
    assert checkpoints.checkpoint_step(str(tmp_path), None) is None


def test_spec_rendered_by_the_chart_parses(helms):
    from conftest import kinds, render

    objs = render(helms[0])
    cm = next(c for c in kinds(objs, "ConfigMap") if "launch.json" in c["data"])
    s = spec_of.parse_spec(json.loads(cm["data"]["launch.json"]))
    assert s.follow is True and s.max_restarts == 3 and s.expected_gpus == 16 and s.expected_nodes == 3
    assert s.expected_interfaces == [f"eth{i}" for i in range(10)]
    assert s.checkpoint_dir == "/data/nemo-rl/gemma3-27b-gsm8k/checkpoints"
    assert s.wait_for_files[0].startswith("/data/nemo-rl/.prepared/")


def test_a_head_that_is_up_but_not_ready_is_retried_other_errors_are_not():
    spec = spec_of.parse_spec({**GOOD, "poll_interval_s": 0.01, "timeouts": {"head_s": 5}})
    answers = iter([RuntimeError("Request failed with status code 500: No available agent to submit job, please try again later.."), "ok"])

    def call():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    assert ray_side.retry(call, spec) == "ok"

    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("Job with submission_id nemo-rl-5031a502ff already exists")

    with pytest.raises(RuntimeError, match="already exists"):
        ray_side.retry(broken, spec)
    assert len(calls) == 1  # not retried, though the id holds "503" and "502"


def test_a_head_that_refuses_connections_is_retried_with_a_back_off_until_its_deadline():
    """A closed port refuses each try at once: without a back-off the launcher asked it every poll
    interval (hundreds of times over the head's wait); with it, the waits double."""
    import socket
    import urllib.request

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    spec = spec_of.parse_spec({**GOOD, "poll_interval_s": 0.05, "timeouts": {"head_s": 3}})
    tries = []

    def refused():
        tries.append(1)
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=5)

    with pytest.raises(ray_side.LaunchFailed, match="unreachable"):
        ray_side.retry(refused, spec)
    # 0.05 + 0.1 + 0.2 + 0.4 + 0.8 + 1.6 > 3 s: at most 7 tries (60 at a fixed 0.05 s)
    assert 2 <= len(tries) <= 8
