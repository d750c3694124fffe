"""Shipping cost rules for the web shop."""

FREE_SHIPPING_THRESHOLD = 50.00
FLAT_RATE = 4.99


def shipping_cost(order_total: float) -> float:
    """Orders of FREE_SHIPPING_THRESHOLD or more ship free; smaller ones pay FLAT_RATE."""
    if order_total > FREE_SHIPPING_THRESHOLD:
        return 0.0
    return FLAT_RATE
