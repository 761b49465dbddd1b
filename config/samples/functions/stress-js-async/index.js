// stress-js-async: three PostgreSQL queries at once with Promise.all, on a
// pool of the `pg` package (installed from package.json by the platform):
// an INSERT into stress_js_async, the table's row count (which may or may
// not see that INSERT: they run at the same time), and the server's clock. It answers the three results and how long the calls took.
//
// pg reads the standard PG* variables (PGHOST, PGPORT, PGUSER, PGDATABASE,
// PGPASSWORD), which the manifest sets; the defaults below are the same.
// The table is created when it is missing. A Node handler cannot choose its
// status, so an unreachable server is a thrown error, answered 500 with
// {"error": ...} naming host:port.
const { Pool } = require('pg');

const host = process.env.PGHOST || '127.0.0.1';
const port = Number(process.env.PGPORT || '5432');
const pool = new Pool({
  host,
  port,
  user: process.env.PGUSER || 'postgres',
  database: process.env.PGDATABASE || 'postgres',
  max: 6,
  connectionTimeoutMillis: 5000,
  idleTimeoutMillis: 10000,
});
// An idle connection that breaks (a server restart) is reported here; the
// pool drops it. Without a listener it would end the process.
pool.on('error', (err) => console.error(`stress-js-async: idle connection to ${host}:${port}: ${err.message}`));

// Two sessions creating the same table at once can collide in the catalog;
// the advisory lock, held until the implicit transaction of the statements
// ends, makes concurrent first calls take turns.
const createTable = `
SELECT pg_advisory_xact_lock(hashtext('stress_js_async'));
CREATE TABLE IF NOT EXISTS stress_js_async (
  id bigserial PRIMARY KEY,
  created_at timestamptz NOT NULL DEFAULT now()
);`;

let tableReady = null; // the promise of the table, kept once it succeeds

function ensureTable() {
  tableReady ??= pool.query(createTable).catch((err) => {
    tableReady = null; // try again on the next call
    throw err;
  });
  return tableReady;
}

exports.handle = async () => {
  const start = process.hrtime.bigint();
  try {
    await ensureTable();
    const [inserted, counted, clock] = await Promise.all([
      pool.query('INSERT INTO stress_js_async DEFAULT VALUES RETURNING id'),
      pool.query('SELECT count(*)::bigint AS rows FROM stress_js_async'),
      pool.query('SELECT now() AS now'),
    ]);
    return {
      insertedId: Number(inserted.rows[0].id),
      rows: Number(counted.rows[0].rows),
      now: clock.rows[0].now.toISOString(),
      queries: 3,
      ms: Math.round(Number(process.hrtime.bigint() - start) / 1e3) / 1e3,
      server: `${host}:${port}`,
    };
  } catch (err) {
    throw new Error(`PostgreSQL at ${host}:${port}: ${err.message || err.code || err}`, { cause: err });
  }
};
