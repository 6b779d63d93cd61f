"""dtapi.py - a small signed-request client for the dtctl protocol (lib/protocol.h).

Tests use it to talk to dtagent and dtsched directly, and to forge bad
requests (unsigned, wrong key, stale, replayed) that dtctl would never send.

    api = DtApi("127.0.0.1", 7070, secret_hex)
    status, body = api.request("POST", "/v1/tasks", {"argv": ["true"]})
    status, body = api.request("GET", "/v1/tasks", sign=False)        # 401
"""
import hashlib
import hmac
import http.client
import json
import os
import re
import secrets
import time


def protocol_version() -> int:
    """DT_PROTOCOL_VERSION as lib/protocol.h defines it (sent as X-DT-Protocol)."""
    h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lib", "protocol.h")
    with open(h) as f:
        return int(re.search(r"#define DT_PROTOCOL_VERSION (\d+)", f.read()).group(1))


PROTOCOL = protocol_version()


def sign(key: bytes, method: str, path: str, timestamp: str, nonce: str, body: bytes) -> str:
    """The X-DT-Signature of a request (protocol.h)."""
    msg = "\n".join([method, path, timestamp, nonce, hashlib.sha256(body).hexdigest()])
    return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()


def sign_reply(key: bytes, status: int, nonce: str, body: bytes) -> str:
    """The X-DT-Signature of a reply to the request that carried nonce (protocol.h):
    what a stand-in for dtsched or an agent must send for our programs to believe it."""
    msg = "\n".join(["reply", str(status), nonce, hashlib.sha256(body).hexdigest()])
    return hmac.new(key, msg.encode(), hashlib.sha256).hexdigest()


def read_secret(home: str) -> str:
    with open(os.path.join(home, "secret")) as f:
        return f.read().strip()


class DtApi:
    def __init__(self, host: str, port: int, secret_hex: str, timeout: float = 10.0):
        self.host, self.port, self.timeout = host, port, timeout
        self.key = bytes.fromhex(secret_hex)

    def raw(self, method, path, body=b"", headers=None):
        """Send exactly these bytes and headers; returns (status, text, headers)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.read().decode(errors="replace"), dict(r.getheaders())
        finally:
            conn.close()

    def signed_headers(self, method, path, body=b"", timestamp=None, nonce=None, key=None):
        ts = str(int(time.time()) if timestamp is None else timestamp)
        nonce = nonce or secrets.token_hex(16)
        sig = sign(key or self.key, method, path.split("?")[0], ts, nonce, body)
        return {"X-DT-Timestamp": ts, "X-DT-Nonce": nonce, "X-DT-Signature": sig,
                "X-DT-Protocol": str(PROTOCOL), "Content-Type": "application/json"}

    def request(self, method, path, obj=None, sign=True, body=None, **kw):
        """Signed request with a JSON body; returns (status, parsed JSON or text)."""
        if body is None:
            body = b"" if obj is None else json.dumps(obj).encode()
        headers = self.signed_headers(method, path, body, **kw) if sign else {}
        status, text, _ = self.raw(method, path, body, headers)
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def timed_status(self, busy):
        """(slowest, count) of GET /v1/status asked every 50 ms while busy() is true
        (at least 5 times): how long the server keeps a client waiting meanwhile."""
        worst, n = 0.0, 0
        while busy() or n < 5:
            t0 = time.monotonic()
            st, body = self.request("GET", "/v1/status")
            assert st == 200, body
            worst = max(worst, time.monotonic() - t0)
            n += 1
            time.sleep(0.05)
        return worst, n

    def wait_task(self, task_id, states=("exited", "failed", "lost"), timeout=20.0):
        """Poll GET /v1/tasks/<id> until its state is one of `states`."""
        deadline = time.time() + timeout
        while True:
            st, body = self.request("GET", "/v1/tasks/" + task_id)
            if st == 200 and body["task"]["state"] in states:
                return body["task"]
            if time.time() > deadline:
                raise AssertionError(f"task {task_id} not in {states} after {timeout}s: {body}")
            time.sleep(0.05)
