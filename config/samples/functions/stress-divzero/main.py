"""stress-divzero: divides ?n= (default 100) by ?d= (default 1).

?d=0 raises ZeroDivisionError, which the runtime answers 500 with
{"error": "ZeroDivisionError: division by zero"}; the process goes on
serving, so the next request answers 200 from the same pid. A Python
handler cannot choose its status, so bad input is an exception (500) too.
"""

import os


def integer(query, name, default):
    raw = query.get(name, default)
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, not {raw!r}") from None


def handle(event):
    n = integer(event["query"], "n", "100")
    d = integer(event["query"], "d", "1")
    return {"n": n, "d": d, "result": n / d, "pid": os.getpid()}
