// stress-js-badenv: a handler that trusts an environment variable to be
// set. It answers {"greeting": ...} from GREETING, which the manifest sets;
// ?bad=1 reads STRESS_UNSET_VARIABLE instead, which nothing sets, and the
// TypeError that follows is answered 500 with {"error": "TypeError: ..."}.
// The process goes on serving: the next request answers 200.
exports.handle = (event) => {
  const bad = event.query.bad ?? '0';
  if (bad !== '0' && bad !== '1') {
    throw new RangeError(`bad must be 0 or 1, not ${JSON.stringify(bad)}`);
  }
  const variable = bad === '1' ? 'STRESS_UNSET_VARIABLE' : 'GREETING';
  return { greeting: process.env[variable].trim(), variable, pid: process.pid };
};
