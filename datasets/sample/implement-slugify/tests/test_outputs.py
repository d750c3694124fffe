import sys
import unittest

sys.path.insert(0, "/app")

from textkit import slugify


class SlugifyTest(unittest.TestCase):
    def test_punctuation_becomes_one_hyphen(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")

    def test_spaces_and_dots_collapse(self):
        self.assertEqual(slugify("  Python 3.12 Release Notes "), "python-3-12-release-notes")

    def test_non_ascii_letters_are_separators(self):
        self.assertEqual(slugify("Café au lait"), "caf-au-lait")

    def test_nothing_left_gives_untitled(self):
        self.assertEqual(slugify("***"), "untitled")
        self.assertEqual(slugify(""), "untitled")

    def test_existing_hyphens_and_underscores_collapse(self):
        self.assertEqual(slugify("--already-a_slug--"), "already-a-slug")

    def test_digits_are_kept(self):
        self.assertEqual(slugify("Top 10 Tips (2026)"), "top-10-tips-2026")

    def test_tabs_and_newlines_are_separators(self):
        self.assertEqual(slugify("Line\tOne\nLine Two"), "line-one-line-two")


if __name__ == "__main__":
    unittest.main(verbosity=2)
