"""Print a greeting in shouting and whispering voices."""

from tools.text_tools import shout, whisper

if __name__ == "__main__":
    print(shout("hello"))
    print(whisper("GOODBYE"))
