"""Parse human-written durations."""


def parse_duration(text: str) -> int:
    """Return the number of seconds in a duration such as "1h30m"."""
    raise NotImplementedError
