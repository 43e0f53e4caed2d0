"""An HTTP server on a free local port, served from a daemon thread, for tests of HTTP clients: start it
with a handler class, point the client at ``server.server_address[1]``, stop it in the test's teardown."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# shutdown() returns at the serving loop's next poll: the default 0.5 s would idle every teardown
POLL_S = 0.02


def start_server(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True).start()
    return server


def stop_server(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()
