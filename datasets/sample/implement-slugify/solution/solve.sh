#!/bin/bash
set -euo pipefail
cat > /app/textkit.py <<'PY'
"""Text helpers for building URLs."""

import re

_SEPARATORS = re.compile(r"[^a-z0-9]+")


def slugify(title: str) -> str:
    """Turn a title into a URL slug (see the task instructions for the rules)."""
    slug = _SEPARATORS.sub("-", title.lower()).strip("-")
    return slug or "untitled"
PY
