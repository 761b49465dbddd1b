"""stress-writer: inserts ?rows= rows (default 100, at most 10000) into the
PostgreSQL table stress_writer in one multi-row INSERT, then counts the
rows of that batch.

It connects with the standard PG* variables (PGHOST, PGPORT, PGUSER,
PGDATABASE, PGPASSWORD; defaults 127.0.0.1, 5432, postgres, postgres), one
connection per call, through pgwire.py: the Python runtime is standard
library only. It creates the table when it is missing. A Python handler
cannot choose its status, so bad input and an unreachable server are
exceptions, answered 500 with {"error": ...} that names the problem.
"""

import os
import threading
import time
import uuid

import pgwire

MAX_ROWS = 10_000

# Two sessions creating the same table at once can collide in the catalog;
# the advisory lock, held until the statements' implicit transaction ends,
# makes the first calls of concurrent instances take turns.
CREATE_TABLE = """
SELECT pg_advisory_xact_lock(hashtext('stress_writer'));
CREATE TABLE IF NOT EXISTS stress_writer (
    id bigserial PRIMARY KEY,
    batch uuid NOT NULL,
    seq integer NOT NULL,
    payload text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS stress_writer_batch ON stress_writer (batch);
"""

table_ready = threading.Event()

# The apostrophe is there to be quoted.
PAYLOAD = "stress-writer's row {} of {}"


def connect():
    host = os.environ.get("PGHOST") or "127.0.0.1"
    port = int(os.environ.get("PGPORT") or "5432")
    return pgwire.Connection(host, port,
                             user=os.environ.get("PGUSER") or "postgres",
                             database=os.environ.get("PGDATABASE") or "postgres",
                             password=os.environ.get("PGPASSWORD", ""))


def row_count(query):
    raw = query.get("rows", "100")
    try:
        rows = int(raw)
    except ValueError:
        rows = -1
    if not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"rows must be an integer between 1 and {MAX_ROWS}, not {raw!r}")
    return rows


def handle(event):
    rows = row_count(event["query"])
    batch = str(uuid.uuid4())
    start = time.monotonic()
    with connect() as conn:
        if not table_ready.is_set():
            conn.query(CREATE_TABLE)
            table_ready.set()
        b = conn.literal(batch)
        values = ",".join(f"({b},{i},{conn.literal(PAYLOAD.format(i, rows))})" for i in range(rows))
        _, tag = conn.query(f"INSERT INTO stress_writer (batch, seq, payload) VALUES {values}")
        result, _ = conn.query(f"SELECT count(*) FROM stress_writer WHERE batch = {b}")
    return {
        "rows": rows,
        "inserted": int(tag.split()[-1]),
        "batch": batch,
        "batchRows": int(result[0][0]),
        "ms": round((time.monotonic() - start) * 1000, 3),
        "server": conn.address,
    }
