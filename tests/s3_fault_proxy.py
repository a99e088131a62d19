#!/usr/bin/python3
"""A fault-injecting HTTP proxy for S3 tests (stdlib only).

Usage: s3_fault_proxy.py --upstream http://127.0.0.1:PORT [--port 0] [--control FILE]
                         [--fail-every N] [--fail-status 503] [--truncate-every N]
                         [--truncate-fraction 0.5] [--delay-every N] [--delay-ms MS]
                         [--methods GET,PUT,...] [--transient] [--transient-s 10]

Sits between an S3 client and an S3 server (s3rver). Every request is forwarded unchanged,
headers included (Host as the client sent it: it is signed), and the answer is passed back
unchanged, except that among the requests whose method is in --methods (all when empty):
  - every fail-every-th one is not forwarded and gets `fail-status` with an S3 SlowDown body;
  - every truncate-every-th one is forwarded, and its answer is sent with the full
    Content-Length but only truncate-fraction of the body, then the connection is closed;
  - every delay-every-th one is forwarded and its answer delayed by delay-ms.
N = 0 disables a fault. With --transient (transient: true), no request for a method and path
that got a fail or truncate fault in the last --transient-s seconds is faulted, as S3's
SlowDowns pass: a client's retries (their backoffs add up to a few seconds) then get through
whatever other clients ask for the same object in between. Without it, one request can meet the
fault count on every retry; and an immunity that the next request for the path used up (this
proxy's first version) let another client's poll of the same object take it. The control file,
when given, is a JSON object with the same settings (fail_every, fail_status, truncate_every,
truncate_fraction, delay_every, delay_ms, methods, transient, transient_s); it is re-read when it
changes, and a change restarts the request count. Prints
"listening on 127.0.0.1:PORT" once ready; logs every injected fault to stderr.
"""
import argparse
import http.client
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te", "trailer"}
SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")


class Faults:
    KEYS = ("fail_every", "fail_status", "truncate_every", "truncate_fraction", "delay_every", "delay_ms", "methods",
            "transient", "transient_s")

    def __init__(self, args):
        self.defaults = {k: getattr(args, k) for k in self.KEYS}
        self.control = args.control
        self.lock = threading.Lock()
        self.settings = dict(self.defaults)
        self.stamp = None
        self.count = 0
        self.immune_until = {}  # (method, path) -> monotonic time until which it is not faulted

    def _reload(self):
        if not self.control:
            return
        try:
            st = os.stat(self.control)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            stamp = None
        if stamp == self.stamp:
            return
        self.stamp = stamp
        self.settings = dict(self.defaults)
        if stamp is not None:
            with open(self.control) as f:
                text = f.read()
            if text.strip():
                self.settings.update(json.loads(text))
        self.count = 0

    def decide(self, method, path):
        """(fail, truncate, delay) for the next request."""
        with self.lock:
            self._reload()
            s = self.settings
            methods = s["methods"]
            if isinstance(methods, str):
                methods = [m for m in methods.split(",") if m]
            if methods and method not in methods:
                return False, False, 0, s
            self.count += 1
            n = self.count

            def every(k):
                return bool(s[k]) and n % int(s[k]) == 0

            fail, truncate = every("fail_every"), every("truncate_every")
            key, now = (method, path), time.monotonic()
            if not s["transient"]:
                pass  # faults by count alone
            elif now < self.immune_until.get(key, 0.0):  # a retry, or another client's request
                fail = truncate = False
            elif fail or truncate:
                self.immune_until[key] = now + float(s["transient_s"])
            return fail, truncate, (int(s["delay_ms"]) if every("delay_every") else 0), s


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _relay(self):
        fail, truncate, delay_ms, s = self.server.faults.decide(self.command, self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if fail:
            sys.stderr.write(f"fault: {s['fail_status']} for {self.command} {self.path}\n")
            self.send_response_only(int(s["fail_status"]))
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(SLOWDOWN)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(SLOWDOWN)
            return
        up = http.client.HTTPConnection(self.server.upstream_host, self.server.upstream_port, timeout=60)
        try:
            up.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    up.putheader(name, value)
            up.endheaders(body if body else None)
            resp = up.getresponse()
            data = resp.read()
            headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP]
            status, reason = resp.status, resp.reason
        finally:
            up.close()
        if delay_ms:
            sys.stderr.write(f"fault: delay {delay_ms} ms for {self.command} {self.path}\n")
            time.sleep(delay_ms / 1000.0)
        if self.command != "HEAD":
            headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
            headers.append(("Content-Length", str(len(data))))
        send = data
        if truncate and self.command != "HEAD" and data:
            send = data[: int(len(data) * float(s["truncate_fraction"]))]
            if len(send) == len(data):
                send = data[:-1]
            sys.stderr.write(f"fault: truncated {len(data)} -> {len(send)} bytes for {self.command} {self.path}\n")
        self.send_response_only(status, reason)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(send)
        if send is not data:
            self.wfile.flush()
            self.close_connection = True

    def _relay_quietly(self):
        try:
            self._relay()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (its timeout)
            self.close_connection = True
        except OSError as e:  # upstream unreachable
            sys.stderr.write(f"proxy: {self.command} {self.path}: {e}\n")
            self.close_connection = True

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay_quietly


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--upstream", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--control")
    p.add_argument("--fail-every", dest="fail_every", type=int, default=0)
    p.add_argument("--fail-status", dest="fail_status", type=int, default=503)
    p.add_argument("--truncate-every", dest="truncate_every", type=int, default=0)
    p.add_argument("--truncate-fraction", dest="truncate_fraction", type=float, default=0.5)
    p.add_argument("--delay-every", dest="delay_every", type=int, default=0)
    p.add_argument("--delay-ms", dest="delay_ms", type=int, default=0)
    p.add_argument("--methods", default="")
    p.add_argument("--transient", action="store_true")
    p.add_argument("--transient-s", dest="transient_s", type=float, default=10.0)
    args = p.parse_args()
    up = urlsplit(args.upstream)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.upstream_host, server.upstream_port = up.hostname, up.port or 80
    server.faults = Faults(args)
    print(f"listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
