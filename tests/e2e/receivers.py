"""Real receivers for the notification tests (test_events.py, bench/notify_submit.py).

- TestCA: a certificate authority of the test's own (openssl), and a server certificate
  for 127.0.0.1/localhost signed by it.
- Webhook: an HTTPS server (python3 http.server + ssl) with that certificate, recording
  every POST; `fail_first` answers 500 to the first N requests.
- smtp_sink(): a local SMTP server (Debian's python3-aiosmtpd) keeping every message.
"""

import json
import os
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class TestCA:
    __test__ = False   # not a pytest class

    def __init__(self, tmp: Path):
        self.dir = tmp
        self.ca_key, self.ca_pem = tmp / "ca.key", tmp / "ca.pem"
        self.key, self.pem = tmp / "server.key", tmp / "server.pem"
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        run = lambda *a: subprocess.run(["openssl"] + list(a), check=True, capture_output=True)
        run("req", "-x509", *ec, "-keyout", str(self.ca_key), "-out", str(self.ca_pem),
            "-days", "2", "-subj", "/CN=dtctl test CA")
        csr = tmp / "server.csr"
        run("req", *ec, "-keyout", str(self.key), "-out", str(csr), "-subj", "/CN=localhost")
        ext = tmp / "ext.cnf"
        ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        run("x509", "-req", "-in", str(csr), "-CA", str(self.ca_pem), "-CAkey",
            str(self.ca_key), "-CAcreateserial", "-out", str(self.pem), "-days", "2",
            "-extfile", str(ext))


class Webhook:
    """An HTTPS receiver on 127.0.0.1; .posts holds (path, JSON body) in arrival order."""

    def __init__(self, ca: TestCA, fail_first: int = 0, hang: bool = False, port: int = 0):
        self.posts = []
        self.cond = threading.Condition()
        self.fail_left = fail_first
        self.hang = hang
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if outer.hang:   # a receiver that never answers
                    outer.release.wait(120)
                    return
                with outer.cond:
                    try:
                        doc = json.loads(body)
                    except ValueError:
                        doc = None
                    outer.posts.append((self.path, doc))
                    status = 500 if outer.fail_left > 0 else 200
                    outer.fail_left -= 1
                    outer.cond.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(ca.pem), str(ca.key))
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path="/hooks/T0SECRET/B0/xyzzy-secret-token"):
        return "https://127.0.0.1:%d%s" % (self.port, path)

    def wait_for(self, pred, timeout=30):
        """The posts once pred(posts) holds (waiting on the receiver's condition)."""
        with self.cond:
            ok = self.cond.wait_for(lambda: pred(self.posts), timeout)
            return ok, list(self.posts)

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def smtp_sink(port):
    """(controller, sink): an aiosmtpd server on 127.0.0.1:port; sink.messages."""
    from aiosmtpd.controller import Controller

    class Sink:
        def __init__(self):
            self.messages = []
            self.cond = threading.Condition()

        async def handle_DATA(self, server, session, envelope):
            with self.cond:
                self.messages.append((envelope.rcpt_tos, envelope.content.decode(errors="replace")))
                self.cond.notify_all()
            return "250 OK"

    sink = Sink()
    c = Controller(sink, hostname="127.0.0.1", port=port)
    c.start()
    return c, sink
