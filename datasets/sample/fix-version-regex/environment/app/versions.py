"""Parse version strings such as "v1.2.3"."""

import re

VERSION_RE = re.compile(r"^v?(\d)\.(\d)\.(\d)$")


def parse_version(text: str) -> tuple[int, int, int]:
    match = VERSION_RE.match(text.strip())
    if match is None:
        raise ValueError(f"not a version: {text!r}")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch
