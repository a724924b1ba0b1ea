"""webhook.workers.LingeringThreadWorker under real gunicorn: back-to-back and pipelined requests on one
connection are all answered, and a connection that goes quiet does not keep the only thread."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import servers

ROOT = Path(__file__).parents[2]
APP = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from webhook import serving

    def app(environ, start_response):
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)) or environ["PATH_INFO"].encode()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    serving.serve(lambda: app, serving.ServerOptions(host="127.0.0.1", port=int(sys.argv[1]), workers=1, threads=1,
                                                     log_level="warning", proc_name="lingering-test",
                                                     worker_class="webhook.workers.LingeringThreadWorker"))
""")


@pytest.fixture(scope="module")
def port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    script = tmp_path_factory.mktemp("lingering") / "serve.py"
    script.write_text(APP.format(root=str(ROOT)))
    chosen = servers.free_port()
    process = subprocess.Popen([sys.executable, str(script), str(chosen)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        servers.eventually(lambda: _answers(chosen), timeout=30)
        yield chosen
    finally:
        servers.stop_process(process)


def _answers(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/up")
        return connection.getresponse().read() == b"/up"
    except OSError:
        return False


def test_back_to_back_requests_on_one_connection_are_all_answered(port):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    for i in range(50):
        connection.request("POST", "/filter", body=f"call {i}".encode())
        assert connection.getresponse().read() == f"call {i}".encode()
    connection.close()


def test_pipelined_requests_are_answered_in_order(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"".join(f"GET /p{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for i in range(3)))
        received = b""
        deadline = time.monotonic() + 5
        # until the last body is in: a response's head and body may arrive in separate reads
        while not all(f"/p{i}".encode() in received for i in range(3)) and time.monotonic() < deadline:
            received += sock.recv(4096)
    assert [received.index(f"/p{i}".encode()) for i in range(3)] == sorted(
        received.index(f"/p{i}".encode()) for i in range(3))


def test_a_quiet_kept_alive_connection_does_not_keep_the_only_thread(port):
    quiet = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    quiet.request("GET", "/first")
    assert quiet.getresponse().read() == b"/first"
    other = http.client.HTTPConnection("127.0.0.1", port, timeout=5)  # one thread: it must be free again
    other.request("GET", "/other")
    assert other.getresponse().read() == b"/other"
    quiet.request("GET", "/again")  # and the quiet one still works, through the poller
    assert quiet.getresponse().read() == b"/again"
    quiet.close()
    other.close()
