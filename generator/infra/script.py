"""Assemble the bring-up and teardown shell scripts from the steps of `infra_steps`.

A script is: a header naming the generator command that wrote it, the settings (only those
its steps read), a few helpers (`run` prints and runs a command, `exists` runs a describe/get
quietly, `query` captures a read, all of them print instead of running with --dry-run), then the
numbered steps. The generator never runs the script.
"""

from __future__ import annotations

import re
import shlex

from generator.gke.profiles import profile
from generator.infra.costs import plan_summary
from generator.infra.options import InfraOptions
from generator.infra.steps import Step, bring_up_steps, teardown_steps, teardown_summary, variables

HELPERS = {
    "show": """\
show() {  # show PREFIX CMD...: print CMD, shell-quoted, after PREFIX
  local prefix="$1"
  shift
  printf '%s' "$prefix"
  printf ' %q' "$@"
  printf '\\n'
}
""",
    "die": """\
die() {
  printf 'error: %s\\n' "$*" >&2
  exit 1
}
""",
    "run": """\
run() {  # run CMD...: print CMD, then run it (only print it with --dry-run)
  show '    +' "$@"
  if [ "$DRY_RUN" = 0 ]; then
    "$@"
  fi
}
""",
    "exists": """\
exists() {  # exists CMD...: whether the describe/get CMD finds its resource
  if [ "$DRY_RUN" = 1 ]; then
    show '    ? check:' "$@"
    [ "$DRY_RUN_ASSUMES" = present ]
    return
  fi
  if "$@" >/dev/null 2>&1; then
    show '    = exists:' "$@"
    return 0
  fi
  return 1
}
""",
    "query": """\
query() {  # query NAME PLACEHOLDER CMD...: set NAME to the output of CMD (PLACEHOLDER with --dry-run)
  local query_name="$1" query_placeholder="$2" query_out
  shift 2
  if [ "$DRY_RUN" = 1 ]; then
    show '    ? read:' "$@"
    query_out="$query_placeholder"
  else
    query_out="$("$@")"
  fi
  printf -v "$query_name" '%s' "$query_out"
}
""",
    "owned": """\
owned() {  # owned FORMAT WANT CMD...: whether the describe CMD prints WANT with --format=FORMAT (this script made it)
  local owned_format="$1" owned_want="$2" owned_out
  shift 2
  if [ "$DRY_RUN" = 1 ]; then
    show '    ? owner:' "$@" "--format=$owned_format"
    return 0
  fi
  owned_out="$("$@" --format="$owned_format" 2>/dev/null)" || return 1
  [ "$owned_out" = "$owned_want" ]
}
""",
    "has_line": """\
has_line() {  # has_line TEXT LINE: whether LINE is one of the lines of TEXT
  case $'\\n'"$1"$'\\n' in
    *$'\\n'"$2"$'\\n'*) return 0 ;;
  esac
  return 1
}
""",
    "require_min_version": """\
require_min_version() {  # require_min_version VERSION MINIMUM WHAT FIX: stop unless VERSION >= MINIMUM
  if [ "$DRY_RUN" = 1 ]; then
    return 0
  fi
  [ -n "$1" ] || die "could not read the GKE version of cluster $CLUSTER or the default of $REGION; set GKE_VERSION"
  local lowest
  lowest="$(printf '%s\\n%s\\n' "$1" "$2" | sort -V)"
  [ "${lowest%%$'\\n'*}" = "$2" ] || die "$3 $2, the minimum for $MIN_GKE_FOR: $4"
}
""",
    "step": """\
step() {  # step N TITLE
  CURRENT_STEP="$1/$STEPS, $2"
  printf '\\n==> [%s/%s] %s\\n' "$1" "$STEPS" "$2"
}
""",
    "on_exit": """\
on_exit() {
  local rc=$?
  if [ "$rc" -ne 0 ] && [ -n "$CURRENT_STEP" ]; then
    printf '\\nerror: stopped in step %s (exit %s). Fix the cause and run this script again: finished steps are skipped.\\n' \\
      "$CURRENT_STEP" "$rc" >&2
  fi
}
""",
}
ALWAYS = ("show", "die", "run", "exists", "step", "on_exit")

_VAR_REF = re.compile(r"\$\{?[#!]?([A-Z][A-Z0-9_]*)")


def _used_names(text: str) -> set[str]:
    return set(_VAR_REF.findall(text))


def _quoted(value: str) -> str:
    """Single-quoted for bash, always (values are validated, but quoting costs nothing)."""
    return "'" + value.replace("'", "'\\''") + "'"


def _assignment(name: str, value: str | tuple[str, ...]) -> str:
    if isinstance(value, tuple):
        items = "".join(f"  {_quoted(v)}\n" for v in value)
        return f"{name}=(\n{items})\n"
    return f"{name}={_quoted(value)}\n"


def _settings(o: InfraOptions, text: str) -> str:
    used = _used_names(text)
    return "".join(_assignment(name, value) for name, value in variables(o) if name in used)


def _helpers(text: str) -> str:
    names = [n for n in HELPERS if n in ALWAYS or re.search(rf"\b{n}\b", text)]
    return "\n".join(HELPERS[n] for n in names)


def _steps_text(steps: list[Step]) -> str:
    parts = []
    for i, s in enumerate(steps, start=1):
        parts.append(f"step {i} {shlex.quote(s.title)}\n{s.body}")
    return "\n".join(parts)


def _arguments() -> str:
    yes = "    --yes) ASSUME_YES=1 ;;\n"
    return (
        'while [ "$#" -gt 0 ]; do\n'
        '  case "$1" in\n'
        "    --dry-run) DRY_RUN=1 ;;\n"
        "    --execute) DRY_RUN=0 ;;\n"
        f"{yes}"
        "    -h | --help)\n"
        "      usage\n"
        "      exit 0\n"
        "      ;;\n"
        "    *)\n"
        "      printf 'error: unknown argument %s (see --help)\\n' \"$1\" >&2\n"
        "      exit 2\n"
        "      ;;\n"
        "  esac\n"
        "  shift\n"
        "done\n"
    )


def _usage(o: InfraOptions, teardown: bool) -> str:
    default = "--dry-run" if o.dry_run else "--execute"
    lines = [
        "Usage: bash SCRIPT [--dry-run | --execute] [--yes]",
        "  --dry-run   print the commands instead of running them",
        "  --execute   run the commands",
    ]
    if teardown:
        lines.append("  --yes       delete without asking for confirmation")
    else:
        lines.append("  --yes       create without asking (needed without a terminal)")
        lines.append("  GKE_VERSION=V bash SCRIPT  creates the cluster at version V (default: the region's default)")
    lines.append(f"Default: {default}.")
    return "usage() {\n  cat <<'EOF'\n" + "\n".join(lines) + "\nEOF\n}\n"


def _header(o: InfraOptions, argv: str, teardown: bool) -> str:
    p = profile(o.gpu)
    what = "Teardown" if teardown else "Bring-up"
    mode = "Autopilot" if o.mode == "autopilot" else "Standard"
    lines = [
        f"{what} of the GKE infrastructure for nemo-rl-gke: {p.display_name} ({p.machine_type}), {mode} cluster.",
        f"Written by: python -m generator infra {argv}",
        "Regenerate instead of editing; names match the values file written with the same options.",
    ]
    if teardown:
        lines.append("Deletes in the reverse order of the bring-up script, only what it created, and asks first unless --yes.")
    else:
        lines.append("Safe to run again: every step checks what exists before it creates anything.")
        lines.append("Lists what it creates and asks first on a terminal; --yes skips the question; without either it refuses.")
    mode_line = "the default is --dry-run (print the commands); --execute runs them" if o.dry_run else "--dry-run prints the commands"
    lines.append(f"Run: bash THIS_FILE [--dry-run | --execute]; {mode_line}.")
    return "#!/usr/bin/env bash\n" + "".join(f"# {line}\n" for line in lines) + "set -euo pipefail\n"


def _script(o: InfraOptions, argv: str, steps: list[Step], teardown: bool, preamble: str = "") -> str:
    body = _steps_text(steps)
    helpers = _helpers(body)
    settings = _settings(o, preamble + helpers + body)
    state = [
        f"DRY_RUN={1 if o.dry_run else 0}",
        # With --dry-run nothing is looked up: the bring-up shows every create, the teardown every delete.
        f"DRY_RUN_ASSUMES={'present' if teardown else 'missing'}",
    ]
    state += ["ASSUME_YES=0", f"STEPS={len(steps)}", "CURRENT_STEP=''"]
    tools = [("gcloud", "install the Google Cloud CLI")]
    if not teardown:
        tools.append(("kubectl", "gcloud components install kubectl"))
    if re.search(r"\brun helm\b", body):
        tools.append(("helm", "install Helm: https://helm.sh/docs/intro/install/"))
    check_tools = (
        'if [ "$DRY_RUN" = 0 ]; then\n'
        + "".join(f'  command -v {t} >/dev/null 2>&1 || die "{t} is not on PATH ({hint})"\n' for t, hint in tools)
        + "fi\n"
    )
    done = (
        "CURRENT_STEP=''\n"
        'if [ "$DRY_RUN" = 1 ]; then\n'
        "  printf '\\nDry run: nothing was changed.\\n'\n"
        "else\n"
        f"  printf '\\n{'Teardown' if teardown else 'Bring-up'} complete.\\n'\n"
        "fi\n"
    )
    return "\n".join(
        [
            _header(o, argv, teardown),
            "# --- settings ---\n" + settings,
            "\n".join(state) + "\n",
            "# --- helpers ---\n" + _usage(o, teardown),
            helpers,
            _arguments() + "trap on_exit EXIT\n" + check_tools,
            *([preamble] if preamble else []),
            "# --- steps ---\n" + body,
            done,
        ]
    )


def bring_up_script(o: InfraOptions, argv: str) -> str:
    ask = (
        'if [ "$DRY_RUN" = 0 ] && [ "$ASSUME_YES" = 0 ]; then\n'
        "  if [ ! -t 0 ]; then\n"
        "    die 'no terminal to ask on, and no --yes: nothing was created.' \\\n"
        "      'See what this script creates with --dry-run, then run it with --yes'\n"
        "  fi\n"
        "  cat <<EOF\n"
        "This creates, in project $PROJECT, whatever of the following is missing (each step checks first):\n"
        f"{plan_summary(o)}"
        "EOF\n"
        "  printf 'Create what is missing? Type yes to go on: '\n"
        "  answer=''\n"
        "  read -r answer || true\n"
        '  case "$answer" in\n'
        "    y | yes) ;;\n"
        "    *)\n"
        "      echo 'aborted: nothing was created' >&2\n"
        "      exit 1\n"
        "      ;;\n"
        "  esac\n"
        "fi\n"
    )
    return _script(o, argv, bring_up_steps(o), teardown=False, preamble=ask)


def teardown_script(o: InfraOptions, argv: str) -> str:
    confirm = (
        'if [ "$DRY_RUN" = 0 ] && [ "$ASSUME_YES" = 0 ]; then\n'
        "  cat <<EOF\n"
        "This deletes, in project $PROJECT:\n"
        f"{teardown_summary(o)}"
        "EOF\n"
        "  printf 'Delete all of this? Type yes to go on: '\n"
        "  answer=''\n"
        "  read -r answer || true\n"
        '  case "$answer" in\n'
        "    y | yes) ;;\n"
        "    *)\n"
        "      echo 'aborted: nothing was deleted' >&2\n"
        "      exit 1\n"
        "      ;;\n"
        "  esac\n"
        "fi\n"
    )
    return _script(o, argv, teardown_steps(o), teardown=True, preamble=confirm)
