import unittest
from pathlib import Path

VERSION = Path("/app/VERSION")


class VersionFileTest(unittest.TestCase):
    def test_holds_newest_released_version(self):
        self.assertEqual(VERSION.read_text().strip(), "1.7.2")

    def test_is_exactly_one_line(self):
        self.assertEqual(VERSION.read_text(), "1.7.2\n")


if __name__ == "__main__":
    unittest.main(verbosity=2)
