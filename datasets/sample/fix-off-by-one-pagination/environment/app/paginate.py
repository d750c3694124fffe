"""Split a list of items into fixed-size pages, numbered from 1."""


def page_count(total: int, per_page: int) -> int:
    """Number of pages needed to show `total` items, `per_page` at a time."""
    return (total + per_page - 1) // per_page


def get_page(items: list, page: int, per_page: int) -> list:
    """The items shown on `page`."""
    start = page * per_page
    return items[start : start + per_page]
