import sys
import unittest

sys.path.insert(0, "/app")

from durations import parse_duration


class ParseDurationTest(unittest.TestCase):
    def test_hours_and_minutes(self):
        self.assertEqual(parse_duration("1h30m"), 5400)

    def test_seconds_only(self):
        self.assertEqual(parse_duration("45s"), 45)

    def test_skipped_unit(self):
        self.assertEqual(parse_duration("2h5s"), 7205)

    def test_all_units(self):
        self.assertEqual(parse_duration("1h1m1s"), 3661)

    def test_zero(self):
        self.assertEqual(parse_duration("0m"), 0)

    def test_multi_digit_numbers(self):
        self.assertEqual(parse_duration("90m"), 5400)
        self.assertEqual(parse_duration("100h"), 360000)

    def test_result_is_an_int(self):
        self.assertIs(type(parse_duration("3m")), int)

    def test_invalid_durations_raise_value_error(self):
        for text in ("", "10", "5x", "1m1h", "1h1h", "1h 30m", " 1h", "h", "-5s", "1.5h"):
            with self.subTest(text=text), self.assertRaises(ValueError):
                parse_duration(text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
