"""Friendly messages."""


def greet(name: str, greeting: str) -> str:
    return f"{greeting}, {name}!"
