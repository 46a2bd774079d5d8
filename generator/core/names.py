"""Name rules, once: Kubernetes' (k8s.io/apimachinery pkg/util/validation: IsDNS1035Label,
IsDNS1123Label, IsDNS1123Subdomain, IsQualifiedName's name part), KubeRay's for a RayCluster
(a DNS-1035 label of at most 53 characters: its Services append suffixes), and the Helm release
names this project accepts (a DNS-1123 label of at most 53, Helm's own limit; the RayCluster is
named after the release). The chart's `_validate.tpl` keeps the RayCluster rule for users of plain
Helm; a test holds its pattern and length to these."""

from __future__ import annotations

import re

DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253
# The name part of a qualified name (label keys) and a label value's form.
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")

RAYCLUSTER_NAME = DNS_1035_LABEL
RAYCLUSTER_MAX = 53
HELM_RELEASE_NAME = DNS_1123_LABEL
HELM_RELEASE_MAX = 53
