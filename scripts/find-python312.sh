#!/usr/bin/env bash
# Print the path of a Python 3.12 interpreter, or explain how to get one and fail.
set -u
candidates=(python3.12)
if command -v pyenv >/dev/null 2>&1; then
  for dir in "$(pyenv root)"/versions/3.12*/bin; do candidates+=("$dir/python3.12"); done
fi
candidates+=(/usr/local/bin/python3.12 /usr/bin/python3.12 "$HOME/.local/bin/python3.12")
for candidate in "${candidates[@]}"; do
  path=$(command -v "$candidate" 2>/dev/null) || continue
  if "$path" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
    echo "$path"
    exit 0
  fi
done
echo "error: Python 3.12 is required (Harbor needs >= 3.12) and none was found." >&2
echo "Looked for python3.12 on PATH, in pyenv versions and in /usr{,/local}/bin." >&2
echo "Install it (e.g. 'pyenv install 3.12' or 'apt-get install python3.12') or run" >&2
echo "'make PYTHON=/path/to/python3.12 ...'." >&2
exit 1
