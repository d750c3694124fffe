import sys
import unittest

sys.path.insert(0, "/app")

from versions import parse_version


class ParseVersionTest(unittest.TestCase):
    def test_multi_digit_minor(self):
        self.assertEqual(parse_version("v1.12.0"), (1, 12, 0))

    def test_multi_digit_major(self):
        self.assertEqual(parse_version("10.0.3"), (10, 0, 3))

    def test_every_part_multi_digit(self):
        self.assertEqual(parse_version("2026.11.305"), (2026, 11, 305))

    def test_single_digits_still_parse(self):
        self.assertEqual(parse_version("v1.2.3"), (1, 2, 3))

    def test_surrounding_whitespace_is_ignored(self):
        self.assertEqual(parse_version("  v2.0.10\n"), (2, 0, 10))

    def test_malformed_versions_raise_value_error(self):
        for text in ("1.2", "1.2.3.4", "v1.2.x", "V1.2.3", "1..3", "vv1.2.3", "1.2.3-rc1", ""):
            with self.subTest(text=text), self.assertRaises(ValueError):
                parse_version(text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
