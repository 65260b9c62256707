#!/usr/bin/env bash
# Regenerates store/.sqlx/ (the offline metadata of sqlx's checked queries) after a change to a
# query or to the migrations. Equivalent to `cargo sqlx prepare` without needing sqlx-cli: builds
# a database from migrations/ and compiles the crate online with SQLX_OFFLINE_DIR set, which makes
# the macros write one query-*.json per query.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(cd .. && pwd)"
db="$root/target/sqlx-prepare.db"
mkdir -p "$root/target"
rm -f "$db" "$db-wal" "$db-shm"
python3 - "$db" migrations/*.sql <<'PY'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
for f in sys.argv[2:]:
    con.executescript(open(f, encoding="utf-8").read())
con.commit()
PY
rm -rf .sqlx
mkdir .sqlx
# The macros run again only if the crate recompiles.
touch src/lib.rs
SQLX_OFFLINE=false DATABASE_URL="sqlite:$db" SQLX_OFFLINE_DIR="$PWD/.sqlx" \
  cargo check -p unmask-store --all-targets --quiet
echo "wrote $(ls .sqlx | wc -l) query files to store/.sqlx"
