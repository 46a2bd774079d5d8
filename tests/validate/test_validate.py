"""`python -m generator validate`: layers, output formats, exit codes, usage errors and secrets never printed
(the corpora: test_validate_corpus.py and test_validate_legitimate.py)."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml
from conftest import render_text
from validate_harness import INVALID, ROOT, header, run_cli

from generator.helm.runner import HelmError
from generator.values.merge import coalesce


def test_a_key_given_twice_is_an_error_with_both_lines(tmp_path):
    text = (ROOT / "charts" / "nemo-rl-gke" / "values.yaml").read_text()
    path = tmp_path / "twice.yaml"
    path.write_text("storage:\n  mountPath: /mnt\n" + text)
    first = 1
    second = 3 + next(i for i, line in enumerate(text.splitlines()) if line.startswith("storage:"))
    proc = run_cli("validate", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        f"error: {path}: line {second}: key 'storage' is given twice (lines {first} and {second}); "
        "YAML and Helm keep only the last, so the first is lost - merge the two into one"
    )


# --- layered values, merged as helm install merges them ----------------------------------------


def test_layers_are_validated_as_one_configuration_in_helms_order(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text((ROOT / "examples" / "tutorial-h200.yaml").read_text())
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("workerGroups:\n  - {name: gpu, replicas: 3, provisioning: spot}\n")
    broken = run_cli("validate", str(base), "-f", str(overlay))
    assert broken.returncode == 1
    assert f"{base} -f {overlay}: grpo.overrides[cluster.num_nodes]:" in broken.stdout
    # --set comes after every -f, as in Helm: it mends what the overlay broke
    mended = run_cli("validate", str(base), "-f", str(overlay), "--set", "workerGroups[0].replicas=2")
    assert mended.returncode == 0, mended.stdout
    assert run_cli("validate", str(base), "--set", "workerGroups[0].replicas=0").returncode == 1


def test_a_token_given_with_set_file_is_neither_printed_nor_refused(tmp_path):
    token = tmp_path / "hf_token"
    token.write_text("hf_not_a_real_token_0123456789\n")
    proc = run_cli(
        "validate",
        str(ROOT / "examples" / "tutorial-h200.yaml"),
        "--set",
        "secrets.source=files",
        "--set",
        "secrets.existingSecret=",
        "--set-file",
        f"secrets.fromFiles.hfToken={token}",
        "--set-file",  # else the chart stops: W&B logging is on and no key file is given (validate renders it)
        f"secrets.fromFiles.wandbApiKey={token}",
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stdout
    assert "hf_not_a_real_token" not in proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["files"][0]["file"].endswith(
        "--set-file secrets.fromFiles.hfToken=... --set-file secrets.fromFiles.wandbApiKey=..."
    )


def test_a_layer_helm_cannot_read_is_one_line(tmp_path):
    proc = run_cli("validate", str(ROOT / "examples" / "tutorial-h200.yaml"), "--set-file", f"x={tmp_path / 'missing'}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert "could not merge the values" in line and "no such file" in line


# --- exit codes, formats, no modification -------------------------------------------------


def test_valid_file_exits_0_and_is_not_modified(tmp_path):
    path = tmp_path / "v.yaml"
    assert run_cli("--gpu", "h200", "-o", str(path)).returncode == 0
    before = hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns
    proc = run_cli("validate", str(path))
    assert proc.returncode == 0, proc.stdout
    assert "valid: 1 file(s), 0 error(s)" in proc.stderr
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime_ns) == before


def test_warnings_pass_unless_strict(tmp_path):
    path = tmp_path / "v.yaml"
    run_cli("--gpu", "h200", "-o", str(path))
    assert "storage.lustre.volumeHandle" in run_cli("validate", str(path)).stdout  # the placeholder warning
    strict = run_cli("validate", "--strict", str(path))
    assert strict.returncode == 1
    assert "(warning)" in strict.stdout


def test_json_output_for_ci():
    proc = run_cli("validate", "--format", "json", str(INVALID[0]), str(ROOT / "charts" / "nemo-rl-gke" / "values.yaml"))
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["valid"] is False
    bad, good = out["files"]
    assert bad["valid"] is False and good["valid"] is True
    assert {"key", "message", "fix", "level"} == set(bad["findings"][0])
    assert header(INVALID[0])["expect"] in {f["key"] for f in bad["findings"]}


@pytest.mark.parametrize(
    ("content", "needle"),
    [(None, "no such file"), ("a: [1, 2\n", "not valid YAML at line"), ("\xff\xfe", "not UTF-8"), ("x" * (2 << 20), "larger than")],
)
def test_usage_errors_exit_2_without_traceback(tmp_path, content, needle):
    path = tmp_path / "v.yaml"
    if content is not None:
        path.write_bytes(content.encode("latin-1") if content.startswith("\xff") else content.encode())
    proc = run_cli("validate", str(path))
    assert proc.returncode == 2
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_file_alone_can_be_checked_without_chart_defaults(tmp_path):
    path = tmp_path / "overlay.yaml"
    path.write_text("workerGroups:\n  - {name: gpu, replicas: 2, provisioning: spot}\n")
    assert run_cli("validate", str(path)).returncode == 0
    alone = run_cli("validate", "--no-chart-defaults", str(path))
    assert alone.returncode == 1 and "accelerator: required key is missing" in alone.stdout


def test_release_name_is_checked(tmp_path):
    path = ROOT / "charts" / "nemo-rl-gke" / "values.yaml"
    assert run_cli("validate", "--release", "9-bad", str(path)).returncode == 1
    bad = run_cli("validate", "--release-name", "9-bad", str(path))
    assert bad.returncode == 1 and "9-bad" in bad.stdout
    assert run_cli("validate", "--release-name", "nemo-rl", str(path)).returncode == 0


def test_coalesce_follows_helm():
    assert coalesce({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": 3, "c": None}, "l": [9]}) == {"a": {"b": 3}, "l": [9]}


def test_generate_writes_nothing_when_the_rules_fail(tmp_path):
    proc = run_cli("--gpu", "h200", "--wandb", "--secret", "", cwd=tmp_path)
    assert proc.returncode == 2
    assert "W&B logging is on but no WANDB_API_KEY reference" in proc.stderr
    assert list(tmp_path.iterdir()) == []


# --- input that used to crash validate ----------------------------------------------------

NON_STRING_KEYS = {
    "root-int-and-str": ("1: a\nfoo: b\n", "1", "unknown key '1'"),
    "root-bool": ("true: a\n", "true", "unknown key 'true'"),
    "env-name-int": ("nccl:\n  extraEnv:\n    5: x\n", "nccl.extraEnv", "'5' is not a name nccl.extraEnv accepts"),
    "ray-param-int": ("worker:\n  rayStartParams:\n    7: x\n", "worker.rayStartParams", "'7' is not a name worker.rayStartParams accepts"),
}


@pytest.mark.parametrize("case", sorted(NON_STRING_KEYS))
def test_non_string_keys_are_keys_as_helm_sees_them(helm_major, tmp_path, case):
    # Helm turns every YAML key into a string before its schema check; so does validate, which
    # used to crash sorting 1 against "foo" and showed the key 1 as a list entry "[1]".
    text, key, message = NON_STRING_KEYS[case]
    path = tmp_path / "v.yaml"
    path.write_text(text)
    with pytest.raises(HelmError, match="values don't meet the specifications of the schema"):
        render_text(helm_major, [path])
    proc = run_cli("validate", str(path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-500:]
    assert any(line.startswith(f"{path}: {key}: ") and message in line for line in proc.stdout.splitlines()), proc.stdout
    assert f"{path}: [" not in proc.stdout


# --- credentials never reach the output ---------------------------------------------------

FAKE_TOKEN = "hf_FAKEtok3nNotReal0123456789abcdef"  # noqa: S105 - a made-up token the output must not show
TOKEN_CASES = {
    "existing-secret-pattern": ({"secrets": {"source": "existing", "existingSecret": FAKE_TOKEN}}, "secrets.existingSecret"),
    "from-files-too-long": ({"secrets": {"source": "files", "fromFiles": {"hfToken": FAKE_TOKEN * 150}}}, "secrets.fromFiles.hfToken"),
    "from-files-not-a-string": (
        {"secrets": {"source": "files", "fromFiles": {"wandbApiKey": [FAKE_TOKEN]}}},
        "secrets.fromFiles.wandbApiKey",
    ),
    "source-enum": ({"secrets": {"source": FAKE_TOKEN}}, "secrets.source"),
    "token-key-too-long": ({"secrets": {"source": "existing", "hfTokenKey": FAKE_TOKEN * 10}}, "secrets.hfTokenKey"),
    "remote-key-pattern": (
        {"secrets": {"source": "external", "external": {"storeName": "gsm", "hfTokenRemoteKey": FAKE_TOKEN + " x"}}},
        "secrets.external.hfTokenRemoteKey",
    ),
    "env-token-wrong-type": ({"extraEnv": [{"name": "HF_TOKEN", "value": [FAKE_TOKEN]}]}, "extraEnv[0].value"),
    "nccl-env-token-wrong-type": ({"nccl": {"extraEnv": {"WANDB_API_KEY": [FAKE_TOKEN]}}}, "nccl.extraEnv.WANDB_API_KEY"),
    # schema-valid: the token has a key name's characters, the rules refuse it
    "token-as-key-name": ({"secrets": {"hfTokenKey": FAKE_TOKEN}}, "secrets.hfTokenKey"),
    "token-as-remote-key": (
        {"secrets": {"source": "external", "existingSecret": "", "external": {"storeName": "gsm", "hfTokenRemoteKey": FAKE_TOKEN}}},
        "secrets.external.hfTokenRemoteKey",
    ),
}


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("case", sorted(TOKEN_CASES))
def test_a_token_in_a_broken_value_is_never_printed(tmp_path, case, fmt):
    change, key = TOKEN_CASES[case]
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(change))
    proc = run_cli("validate", "--format", fmt, str(path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-500:]
    assert FAKE_TOKEN not in proc.stdout + proc.stderr
    assert FAKE_TOKEN[:12] not in proc.stdout + proc.stderr  # not even cut short
    keys = {f["key"] for f in json.loads(proc.stdout)["files"][0]["findings"]} if fmt == "json" else proc.stdout
    assert key in keys, proc.stdout


def test_an_alias_bomb_is_refused_naming_its_file(tmp_path):
    good = ROOT / "charts" / "nemo-rl-gke" / "values.yaml"
    bomb = tmp_path / "bomb.yaml"
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 7)]
    bomb.write_text("\n".join(lines) + "\n")
    proc = run_cli("validate", str(good), str(bomb))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"error: {bomb}: document has more than" in proc.stderr, proc.stderr
