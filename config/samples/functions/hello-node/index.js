// hello: greets the caller, by name when ?name= is given.
exports.handle = async (event) => {
  const name = event.query.name || 'world';
  return { message: `hello ${name}`, runtime: 'node', method: event.method };
};
