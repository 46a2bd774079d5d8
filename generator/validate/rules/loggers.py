"""Loggers: what NeMo RL's Logger hands to W&B and MLflow at start, before the first step.

NeMo RL (nemo_rl/utils/logger.py, v0.5.0 to v0.7.0, vendor/nemo-rl-src/) calls
`wandb.init(**cfg["wandb"], dir=log_dir)` and MLflowLogger `mlflow.set_tracking_uri(tracking_uri)`
with `logger.mlflow.tracking_uri` (the base config's is http://localhost:5000).
- wandb.init's keyword arguments (wandb/wandb, wandb/sdk/wandb_init.py `init`, as its signature
  prints in tracebacks, e.g. ultralytics/yolov5 issue 10940); `dir` is NeMo RL's own.
- Project names and run ids cannot contain / \\ # ? % : (wandb/wandb wandb_settings.py, "Invalid
  project name ...: cannot contain characters"; the id rule in wandb.init's reference, wandb/wandb
  pull 4191) and are at most 128 characters (W&B's limit, as NVIDIA-NeMo/Skills pull 859 checks it).
- resume (docs.wandb.ai, "Resume a run"): "must" raises when the id does not exist yet, which is
  every first launch; the values are allow, must, never and auto.
- MLflow's tracking URI (mlflow.org, mlflow.tracking set_tracking_uri): empty or a local path,
  file:/, http(s)://, databricks, or a database URI; localhost is the Ray head pod, where no
  tracking server runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from generator.validate.findings import Finding, error
from generator.validate.rules.context import Context

WANDB_INIT = frozenset(
    [
        "job_type",
        "config",
        "project",
        "entity",
        "reinit",
        "tags",
        "group",
        "name",
        "notes",
        "magic",
        "config_exclude_keys",
        "config_include_keys",
        "anonymous",
        "mode",
        "allow_val_change",
        "resume",
        "force",
        "tensorboard",
        "sync_tensorboard",
        "monitor_gym",
        "save_code",
        "id",
        "settings",
        "resume_from",
        "fork_from",
    ]
)
FORBIDDEN = "/\\#?%:"
MAX_NAME = 128
RESUME = ("allow", "must", "never", "auto")
LOOPBACK = ("localhost", "127.0.0.1", "::1", "0.0.0.0")  # noqa: S104 - names compared, nothing bound
MLFLOW_SCHEMES = ("", "file", "http", "https", "databricks", "databricks-uc", "sqlite", "postgresql", "mysql", "mssql")


def _mapping(ctx: Context, key: str) -> dict[str, Any]:
    value = ctx.section(key)  # plain Python as written (omegaconf only where the recipe needs it)
    return dict(value) if isinstance(value, dict) else {}


def _forbidden(text: str) -> str | None:
    found = [c for c in text if c in FORBIDDEN]
    if found:
        return f"W&B refuses the characters {' '.join(FORBIDDEN)} in it (found {found[0]!r})"
    if len(text) > MAX_NAME:
        return f"{len(text)} characters, above W&B's {MAX_NAME}"
    return None


def _wandb(ctx: Context) -> Iterator[Finding]:
    cfg = _mapping(ctx, "logger.wandb")
    for key in sorted(cfg):
        if key == "dir":
            yield error(ctx.where("logger.wandb.dir"), "NeMo RL passes dir itself: wandb.init gets it twice and stops", "remove it")
        elif key not in WANDB_INIT:
            yield error(
                ctx.where(f"logger.wandb.{key}"),
                f"{key} is not a wandb.init argument: NeMo RL passes logger.wandb whole to wandb.init, which refuses it",
                "remove it (wandb.init takes project, entity, name, id, resume, group, tags, ...)",
            )
    for key in ("project", "entity", "id", "group"):
        value = cfg.get(key)
        if isinstance(value, str) and not value.startswith("${") and (why := _forbidden(value)) is not None:
            fix = (
                "put the team in logger.wandb.entity and the project alone here"
                if "/" in value and key == "project"
                else "use letters, digits, '-', '_' and '.'"
            )
            yield error(ctx.where(f"logger.wandb.{key}"), f"{value!r}: {why}; wandb.init stops", fix)
    resume = cfg.get("resume")
    if resume is not None and not isinstance(resume, bool) and str(resume) not in RESUME:
        yield error(ctx.where("logger.wandb.resume"), f"{resume!r} is not a W&B resume mode", "use allow")
    elif resume == "must":
        yield error(
            ctx.where("logger.wandb.resume"),
            "must: W&B raises when the run id does not exist yet, as on this release's first launch",
            "use allow (resumes when the run exists, creates it otherwise)",
        )
    run_id, run = cfg.get("id"), ctx.grpo.get("runName")
    if run_id is not None and run and str(run_id) != str(run) and resume in ("allow", "must", "auto"):
        yield error(
            ctx.where("logger.wandb.id"),
            f"{run_id!r} is not grpo.runName ({run!r}): the renamed run starts at step 0 in a new folder but writes into the old"
            " W&B run, whose steps are ahead (W&B drops the new steps)",
            f"set +logger.wandb.id={run} (or drop it with the resume setting)",
        )


def _mlflow(ctx: Context) -> Iterator[Finding]:
    cfg = _mapping(ctx, "logger.mlflow")
    uri = cfg.get("tracking_uri")
    if not isinstance(uri, str) or uri.startswith("${"):
        return
    parsed = urlparse(uri)
    scheme = parsed.scheme.split("+", 1)[0]
    if scheme not in MLFLOW_SCHEMES:
        yield error(
            ctx.where("logger.mlflow.tracking_uri"),
            f"{uri!r}: MLflow reads {parsed.scheme!r} as a URI scheme it has no store for",
            "write the server as http://HOST:PORT",
        )
    elif scheme in ("http", "https") and (parsed.hostname or "") in LOOPBACK:
        yield error(
            ctx.where("logger.mlflow.tracking_uri"),
            f"{uri}: localhost is the Ray head pod, where no MLflow server runs; the Logger's first call fails",
            "point it at your tracking server's Service, e.g. http://mlflow.mlflow.svc:5000",
        )


def check(ctx: Context) -> Iterator[Finding]:
    if not ctx.grpo.get("enabled", True) or ctx.recipe_check is None:  # run_config is None exactly then; building it costs omegaconf
        return
    if ctx.setting("logger.wandb_enabled") is True:
        yield from _wandb(ctx)
    if ctx.setting("logger.mlflow_enabled") is True:
        yield from _mlflow(ctx)
