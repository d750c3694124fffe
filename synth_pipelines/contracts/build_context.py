"""What a task's Dockerfile may copy: the build-context sources its COPY/ADD name, found
by Docker's rules. Any builder copies them, so the registry checks them when a task is
published and the local sandbox resolves them when it lays a task's files down."""

from __future__ import annotations

import io
import json
from pathlib import Path

from dockerfile_parse import DockerfileParser

REMOTE_SOURCE_MARKERS = ("://", "git@")


def context_sources(dockerfile: Path) -> list[tuple[str, int]]:
    """(source, line) of every build-context source a Dockerfile's COPY/ADD names,
    whatever else it holds: what any builder, not only the local sandbox, copies from
    the build context. Remote sources, `--from` stages and variables are not the
    context's, so they are left out."""
    parser = DockerfileParser(fileobj=io.BytesIO(dockerfile.read_bytes()))
    found = []
    for item in parser.structure:
        if item["instruction"] not in ("COPY", "ADD") or "$" in item["value"]:
            continue
        words = item["value"].split()
        flags = [word for word in words if word.startswith("--")]
        if any(flag.startswith("--from") for flag in flags):
            continue
        rest = " ".join(words[len(flags) :])
        arguments = json.loads(rest) if rest.startswith("[") else rest.split()
        found += [
            (source, item["startline"] + 1)
            for source in arguments[:-1]
            if not any(marker in source for marker in REMOTE_SOURCE_MARKERS)
        ]
    return found


def resolve_source(pattern: str, line: int, context: Path) -> list[Path]:
    """The build-context files one COPY/ADD source names (Docker's rules: relative to
    the context, globs allowed); FileNotFoundError if none exists, PermissionError if
    one resolves outside the context, each naming the source, its line and the fix."""
    context = context.resolve()
    relative = pattern.lstrip("/") or "."
    matches = [context] if relative in (".", "./") else sorted(context.glob(relative))
    if not matches:
        raise FileNotFoundError(
            f"COPY/ADD source {pattern!r} (Dockerfile line {line}) is not in the build "
            f"context {context}; add the file there or fix the Dockerfile"
        )
    for match in matches:
        if not match.resolve().is_relative_to(context):
            raise PermissionError(
                f"COPY/ADD source {pattern!r} (Dockerfile line {line}) resolves outside the "
                f"build context {context}; a Dockerfile can only copy what its own "
                "directory holds, so move the file into it"
            )
    return matches
