// stress-bigloop: spins the CPU for ?n= loop iterations (default 10 million,
// at most 2 billion) and reports how long that took.
//
// Node runs one handler call at a time on its event loop, so a busy loop
// holds the whole instance: the manifest sets concurrency 1 and target 1,
// and parallel callers make the autoscaler add instances. By the runtime
// contract a Node handler cannot answer 400, so a bad ?n= is a thrown
// error, answered 500 with {"error": ...}.
const MAX_N = 2_000_000_000;

exports.handle = (event) => {
  const raw = event.query.n ?? '10000000';
  const n = Number(raw);
  if (!/^\d{1,10}$/.test(raw) || n > MAX_N) {
    throw new RangeError(`n must be an integer between 0 and ${MAX_N}, not ${JSON.stringify(raw)}`);
  }
  const start = process.hrtime.bigint();
  let acc = 0;
  for (let i = 0; i < n; i++) {
    acc = (acc + i) % 1_000_003; // depends on every step, so it is not optimised away
  }
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  return { n, result: acc, ms: Math.round(ms * 1000) / 1000, pid: process.pid };
};
