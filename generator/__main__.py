import sys
from importlib.util import find_spec
from pathlib import Path

# What `python -m generator` needs at run time (pyproject.toml's dependencies), checked before
# anything imports them, so a Python outside the project's virtualenv gets one line, not a traceback.
RUNTIME_MODULES = ("yaml", "ruamel.yaml", "jsonschema", "kubernetes_validate", "hydra", "omegaconf")


def _missing() -> list[str]:
    out = []
    for name in RUNTIME_MODULES:
        try:
            if find_spec(name) is None:
                out.append(name)
        except ModuleNotFoundError:  # a missing parent package (ruamel)
            out.append(name)
    return out


if missing := _missing():
    venv = Path(__file__).resolve().parent.parent / ".venv"
    print(
        f"error: {sys.executable} lacks {', '.join(missing)}: activate the project's virtualenv "
        f"(source {venv}/bin/activate; scripts/setup.sh creates it) or run {venv}/bin/python -m generator",
        file=sys.stderr,
    )
    sys.exit(2)

from generator.cli import main  # noqa: E402

sys.exit(main())
