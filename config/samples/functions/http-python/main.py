"""A Python function that chooses its answers with sless.Response and streams
events from a generator: the twin of http-go and http-node."""

import base64
import re
import time

from sless import Response

PIXEL = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


def handle(event):
    path = event["path"]
    if path == "/orders/7":
        return {"id": "7", "item": "tea"}
    if path.startswith("/orders/"):
        return Response({"error": "no order " + path[len("/orders/"):]}, status=404,
                        headers={"Set-Cookie": ["a=1; Path=/", "b=2; Path=/"]})
    if path == "/pixel.png":
        return Response(PIXEL, headers={"Content-Type": "image/png"})
    if path == "/events":
        return events(event["query"])
    return Response({"error": "no route " + path}, status=404)


def events(query):
    n, every = query.get("n", ""), re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)", query.get("every", ""))
    if not n.isdigit() or not 1 <= int(n) <= 100 or not every:
        return Response({"error": "want ?n= from 1 to 100 and ?every= up to 60s, such as ?n=3&every=1s"}, status=400)
    seconds = float(every[1]) / (1000 if every[2] == "ms" else 1)
    if seconds > 60:
        return Response({"error": "want ?every= up to 60s"}, status=400)

    def stream():
        for i in range(int(n)):
            if i:
                time.sleep(seconds)
            yield f"data: {i}\n\n"  # reaches the caller now

    return Response(stream(), headers={"Content-Type": "text/event-stream"})
