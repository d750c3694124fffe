import sys
import unittest

sys.path.insert(0, "/app")

from paginate import get_page, page_count

ITEMS = list(range(25))


class GetPageTest(unittest.TestCase):
    def test_first_page_starts_at_first_item(self):
        self.assertEqual(get_page(ITEMS, 1, 10), list(range(10)))

    def test_middle_page(self):
        self.assertEqual(get_page(ITEMS, 2, 10), list(range(10, 20)))

    def test_last_page_is_partial(self):
        self.assertEqual(get_page(ITEMS, 3, 10), list(range(20, 25)))

    def test_page_past_the_end_is_empty(self):
        self.assertEqual(get_page(ITEMS, 4, 10), [])

    def test_pages_cover_every_item_once(self):
        pages = [get_page(ITEMS, n, 7) for n in range(1, page_count(len(ITEMS), 7) + 1)]
        self.assertEqual([item for page in pages for item in page], ITEMS)

    def test_page_count_unchanged(self):
        self.assertEqual(page_count(25, 10), 3)
        self.assertEqual(page_count(20, 10), 2)
        self.assertEqual(page_count(0, 10), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
