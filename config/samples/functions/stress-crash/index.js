// stress-crash: ?crash=1 ends the process without answering, the way a
// fatal bug would; the platform counts the crash and starts a new instance.
// Otherwise it answers {"ok": true, "pid": ...}, so callers can tell the
// instances apart.
exports.handle = (event) => {
  const crash = event.query.crash ?? '0';
  if (crash !== '0' && crash !== '1') {
    throw new RangeError(`crash must be 0 or 1, not ${JSON.stringify(crash)}`);
  }
  if (crash === '1') {
    console.error(`stress-crash: pid ${process.pid} exits on request`);
    process.exit(1);
  }
  return { ok: true, pid: process.pid };
};
