"""Text helpers for building URLs."""


def slugify(title: str) -> str:
    """Turn a title into a URL slug (see the task instructions for the rules)."""
    raise NotImplementedError
