#!/bin/bash
# Copy every .txt note from SOURCE_DIR into BACKUP_DIR.
# Usage: backup.sh SOURCE_DIR BACKUP_DIR
set -eu
src=$1
dest=$2
mkdir -p $dest
for note in $(ls $src/*.txt); do
  cp $note $dest/
done
echo "backed up $(ls $dest | wc -l) notes"
