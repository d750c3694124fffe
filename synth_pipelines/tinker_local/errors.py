"""Errors the service reports to clients, split by who has to act on them."""

from __future__ import annotations


class UserError(Exception):
    """The request was wrong: the client must change it.

    Raised anywhere in the service; reported as the SDK's user-category failure
    (`RequestFailedError` with `category=user` for operations that return a future,
    HTTP 400 for the others), and the service keeps serving.
    """


class NotFoundError(UserError):
    """The request names a session, model, sampler or checkpoint the service does not hold."""


class MissingCredentialsError(UserError):
    """The request carries no API key, or not the service's."""
