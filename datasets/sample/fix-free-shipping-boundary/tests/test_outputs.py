import sys
import unittest

sys.path.insert(0, "/app")

from shipping import FLAT_RATE, FREE_SHIPPING_THRESHOLD, shipping_cost


class ShippingCostTest(unittest.TestCase):
    def test_order_at_threshold_ships_free(self):
        self.assertEqual(shipping_cost(50.00), 0.0)

    def test_order_above_threshold_ships_free(self):
        self.assertEqual(shipping_cost(120.00), 0.0)

    def test_order_just_below_threshold_pays_flat_rate(self):
        self.assertEqual(shipping_cost(49.99), 4.99)

    def test_empty_order_pays_flat_rate(self):
        self.assertEqual(shipping_cost(0.0), 4.99)

    def test_rule_constants_unchanged(self):
        self.assertEqual((FREE_SHIPPING_THRESHOLD, FLAT_RATE), (50.00, 4.99))


if __name__ == "__main__":
    unittest.main(verbosity=2)
