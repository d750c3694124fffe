import sys
import unittest

sys.path.insert(0, "/app")

from convert import celsius_to_fahrenheit, fahrenheit_to_celsius


class ConversionTest(unittest.TestCase):
    def test_freezing_point(self):
        self.assertAlmostEqual(celsius_to_fahrenheit(0), 32)

    def test_boiling_point(self):
        self.assertAlmostEqual(celsius_to_fahrenheit(100), 212)

    def test_scales_meet_at_minus_forty(self):
        self.assertAlmostEqual(celsius_to_fahrenheit(-40), -40)

    def test_body_temperature(self):
        self.assertAlmostEqual(celsius_to_fahrenheit(37), 98.6)

    def test_round_trip(self):
        for celsius in (-273.15, -12.5, 0, 21.3, 1000):
            self.assertAlmostEqual(fahrenheit_to_celsius(celsius_to_fahrenheit(celsius)), celsius)

    def test_reverse_conversion_unchanged(self):
        self.assertAlmostEqual(fahrenheit_to_celsius(212), 100)


if __name__ == "__main__":
    unittest.main(verbosity=2)
