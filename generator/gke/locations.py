"""Google Cloud locations as the infra script and `validate` read them: a region (us-central1,
europe-west4) and its zones, the region plus a suffix (us-central1-a)."""

from __future__ import annotations

import re

REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]{1,2}$")
ZONE_SUFFIX = re.compile(r"^-[a-z]$")
