"""hello: greets the caller, by name when ?name= is given."""


def handle(event):
    name = event["query"].get("name", "world")
    return {"message": f"hello {name}", "runtime": "python", "method": event["method"]}
