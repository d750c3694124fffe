#!/bin/bash
set -euo pipefail
sed -i 's/def greet(name: str, greeting: str) -> str:/def greet(name: str, greeting: str = "Hello") -> str:/' /app/greetings.py
