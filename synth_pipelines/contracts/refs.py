"""Parsing of `org/name@version` references, shared by datasets and profiles."""

from __future__ import annotations

import re

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
VERSION_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def check_name(name: str, what: str) -> str:
    if not NAME_PATTERN.match(name) or ".." in name:
        raise ValueError(
            f"{what} name {name!r} is not of the form 'org/name' "
            "(letters, digits, '.', '_' and '-')"
        )
    return name


def check_version(version: str, what: str) -> str:
    if not VERSION_PATTERN.match(version):
        raise ValueError(
            f"{what} version {version!r} must start with a letter or digit and use only "
            "letters, digits, '.', '_', '+' and '-'"
        )
    return version


def parse_ref(ref: str, what: str) -> tuple[str, str]:
    """`org/name@version` -> (name, version), with a message naming the bad part."""
    name, sep, version = ref.partition("@")
    if not sep or not version:
        raise ValueError(f"{what} reference {ref!r} needs a version: write 'org/name@version'")
    return check_name(name, what), check_version(version, what)
