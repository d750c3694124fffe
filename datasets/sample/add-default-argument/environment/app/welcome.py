"""Welcome the first users."""

from greetings import greet

for user in ("Ada", "Grace"):
    print(greet(user))
print(greet("Alan", "Good evening"))
