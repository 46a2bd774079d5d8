"""Packaging and docs: Chart.yaml, helm package, CHANGELOG, examples, generated README parts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import CHART, render_text

from generator.gke.profiles import PROFILES
from generator.nemo_rl.releases import DEFAULT_RELEASE
from generator.render.manifests import parse_documents, validate_documents
from generator.sync import EXAMPLES, EXAMPLES_DIR
from generator.validate.values import validate_values
from generator.values.docs import END, START
from generator.values.merge import as_helm_sees_it

ROOT = Path(__file__).resolve().parents[2]
CHART_YAML = yaml.safe_load((CHART / "Chart.yaml").read_text())
EXAMPLE_FILES = sorted(EXAMPLES_DIR.glob("*.yaml"))


def test_chart_yaml_is_complete():
    for key in ("description", "home", "sources", "maintainers", "keywords", "kubeVersion", "appVersion", "version", "type"):
        assert CHART_YAML.get(key), key
    assert CHART_YAML["appVersion"] == DEFAULT_RELEASE
    assert re.match(r"^\d+\.\d+\.\d+$", CHART_YAML["version"])


# chart-testing's Chart.yaml schema (helm/chart-testing etc/chart_schema.yaml, commit 530f60a2,
# 2026-06-23): the keys it knows, and a maintainer's; `ct lint` also checks each maintainer's name is
# an account of the repository's host (pkg/chart/chart.go ValidateMaintainers). GitHub account
# names: letters, digits and single hyphens, at most 39 characters.
CT_CHART_KEYS = {
    "name", "home", "version", "apiVersion", "appVersion", "description", "keywords", "sources", "maintainers",
    "dependencies", "icon", "engine", "condition", "tags", "deprecated", "kubeVersion", "annotations", "type",
}  # fmt: skip
GITHUB_ACCOUNT = re.compile(r"^[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}$")


def test_chart_yaml_has_what_chart_testing_lint_expects():
    assert set(CHART_YAML) <= CT_CHART_KEYS
    for key in ("home", "icon"):
        assert isinstance(CHART_YAML[key], str) and CHART_YAML[key].startswith("https://"), key
    assert CHART_YAML["sources"] and all(isinstance(s, str) for s in CHART_YAML["sources"])
    assert CHART_YAML["maintainers"]
    for m in CHART_YAML["maintainers"]:
        assert set(m) <= {"name", "email", "url"} and GITHUB_ACCOUNT.match(m["name"]), m
        assert CHART_YAML["home"].startswith(f"https://github.com/{m['name']}/")
    # the icon is this repository's own file, at the path its URL names
    assert (ROOT / CHART_YAML["icon"].split("/main/", 1)[1]).is_file()


def test_packaged_chart_leaves_out_development_files(helm_major, tmp_path):
    import shutil
    import tarfile

    chart = tmp_path / "nemo-rl-gke"
    shutil.copytree(CHART, chart)
    (chart / "files" / "__pycache__").mkdir(exist_ok=True)
    (chart / "files" / "__pycache__" / "launcher.cpython-311.pyc").write_bytes(b"\0")
    helm_major.run(["package", str(chart), "--destination", str(tmp_path)])
    (tgz,) = tmp_path.glob("nemo-rl-gke-*.tgz")
    with tarfile.open(tgz) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames()}
    assert not [n for n in names if n.startswith("ci/") or "__pycache__" in n or n.endswith(".pyc")], sorted(names)
    assert {"Chart.yaml", "values.yaml", "values.schema.json", "README.md", "templates/raycluster.yaml", "files/launcher.py"} <= names


def test_kube_version_is_the_oldest_accelerator_minimum():
    oldest = min(tuple(map(int, p.min_gke_version.split("-")[0].split("."))) for p in PROFILES.values())
    assert CHART_YAML["kubeVersion"] == ">=" + ".".join(map(str, oldest)) + "-0"


def test_changelog_top_entry_is_the_chart_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    entries = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, re.M)
    assert entries, "no released entry"
    assert entries[0][0] == CHART_YAML["version"], "bump Chart.yaml version and add a CHANGELOG entry together"
    sections = set(re.findall(r"^### (\w+)$", text, re.M))
    assert sections <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_packaged_chart_renders_the_same_manifests(helm_major, tmp_path):
    out = helm_major.run(["package", str(CHART), "--destination", str(tmp_path)])
    (tgz,) = tmp_path.glob("nemo-rl-gke-*.tgz")
    assert tgz.name == f"nemo-rl-gke-{CHART_YAML['version']}.tgz" and "Successfully packaged" in out
    example = EXAMPLES_DIR / "tutorial-h200.yaml"
    assert helm_major.template([example], chart=tgz) == helm_major.template([example])
    assert helm_major.template(chart=tgz) == helm_major.template()


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_validates_lints_and_renders(helm_major, path):
    errors = [f for f in validate_values(as_helm_sees_it(yaml.safe_load(path.read_text()))) if f.level == "error"]
    assert errors == []
    assert "0 chart(s) failed" in helm_major.lint([path])
    assert validate_documents(parse_documents(render_text(helm_major, [path]))) == []


def test_every_example_exists_for_every_accelerator_and_is_explained():
    readme = (ROOT / "README.md").read_text()
    assert {p.stem for p in EXAMPLE_FILES} == {f"{n}-{g}" for n in EXAMPLES for g in PROFILES}
    for name in EXAMPLES:
        section = readme.split(f"examples/{name}-", 1)
        assert len(section) == 2, f"README does not present examples/{name}-*.yaml"
        assert re.search(r"node-hours|nodes? x \d", section[1][:1500]), f"no cost for {name}"


def test_the_readme_is_the_users_short_path():
    # issue 27: what it is, prerequisites, quickstart, the tutorial's run, where next; the rest in docs/
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < 120, f"README.md has {len(lines)} lines: move detail to docs/"


def test_chart_readme_table_lists_every_schema_key():
    readme = (CHART / "README.md").read_text()
    table = readme.split(START, 1)[1].split(END, 1)[0]
    for key in (
        "accelerator.type",
        "grpo.overrides",
        "secrets.source",
        "access.networkPolicy.enabled",
        "gke.mode",
        "workerGroups[].replicas",
    ):
        assert f"| `{key}` |" in table, key


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """Markdown without fenced code blocks and inline code, where links and headings are not."""
    return re.sub(r"`[^`\n]*`", "", _FENCE.sub("", text))


def _anchors(path: Path) -> set[str]:
    """The ids GitHub gives a file's headings: lowercase, punctuation dropped, spaces as '-',
    a repeated id suffixed -1, -2, ..."""
    ids: set[str] = set()
    counts: dict[str, int] = {}
    for title in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", _FENCE.sub("", path.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", title.replace("`", "").strip().lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        ids.add(f"{slug}-{n}" if n else slug)
    return ids


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_in_the_docs_resolves(doc):
    broken = []
    for target in _LINK.findall(_prose(doc.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists() or ROOT not in (dest, *dest.parents):
            broken.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in _anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert broken == []


def test_the_docs_pages_are_linked_from_the_readme():
    links = set(_LINK.findall(_prose((ROOT / "README.md").read_text())))
    for page in DOCS[1:]:
        assert any(t.partition("#")[0] == f"docs/{page.name}" for t in links), page.name
