"""The error a refused submission raises, apart from the submission path itself, so that
the CLI's error handling can name it without importing that path."""

from __future__ import annotations


class SubmissionError(ValueError):
    """A submitted argument that cannot be used; the message says which and why."""
