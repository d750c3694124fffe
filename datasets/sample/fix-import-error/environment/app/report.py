"""Summarise a file of numbers, one per line."""

import sys
from statistics import average, median


def summarize(values: list[float]) -> str:
    return f"n={len(values)} mean={average(values):.2f} median={median(values):.2f}"


if __name__ == "__main__":
    with open(sys.argv[1]) as numbers:
        print(summarize([float(line) for line in numbers if line.strip()]))
