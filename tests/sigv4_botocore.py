#!/usr/bin/python3
"""Agreement of dcr's S3 request signing with botocore's S3SigV4Auth.

Usage: sigv4_botocore.py DCR_SIGV4_TOOL

Builds a fixed set of S3 requests (the shapes the s3:// backend sends, plus keys and prefixes
that need encoding, both addressing styles, temporary credentials), signs each with botocore's
S3SigV4Auth at a fixed time, has dcr_sigv4_tool (tests/sigv4_tool_main.cc) build and sign the
same requests with dcr's code, and fails on any difference in the Authorization header or the
URL. Needs python3-botocore (scripts/install-deps.sh); fails, not skips, without it.
"""
import datetime
import hashlib
import json
import subprocess
import sys
from unittest import mock
from urllib.parse import unquote, urlsplit

try:
    import botocore
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.config import Config
    from botocore.credentials import Credentials
    from botocore.utils import percent_encode
except ImportError as e:
    sys.exit(f"FAIL: botocore is not importable ({e}); run scripts/install-deps.sh (Debian python3-botocore)")

AK, SK = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TOKEN = "IQoJb3JpZ2luX2VjEAMaCXVzLWVhc3QtMSJHMEUCIQD+session/token=="
UPLOAD_ID = "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA--~x.y_z+/="
BODY = bytes(range(256)) * 5 + b"tail"
COMPLETE = (b'<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"0123456789abcdef0123456789abcdef"'
            b"</ETag></Part></CompleteMultipartUpload>")


def case(name, method, key, *, endpoint="http://127.0.0.1:9000", bucket="dcr-test", vhost=False, region="us-east-1",
         query=(), headers=(), body=b"", unsigned=False, token="", when=(2024, 2, 29, 23, 59, 58)):
    return dict(name=name, method=method, key=key, endpoint=endpoint, bucket=bucket, virtual_host=vhost, region=region,
                query=[list(q) for q in query], headers=[list(h) for h in headers], body=body, unsigned_payload=unsigned,
                session_token=token, when=when)


CASES = [
    case("get-unsigned-payload", "GET", "runs/v1/a.bin", unsigned=True),
    case("get-empty-payload", "GET", "runs/v1/a.bin"),
    case("put-signed-payload", "PUT", "runs/v1/payload-0001.dcr", body=BODY),
    case("put-empty-object", "PUT", "empty", body=b""),
    case("get-range", "GET", "runs/v1/big.bin", headers=[("Range", "bytes=16777216-33554431")]),
    case("get-range-if-match", "GET", "runs/v1/big.bin",
         headers=[("If-Match", '"9b2cf535f27731c974343645a3985328-3"'), ("Range", "bytes=0-16777215")]),
    case("head", "HEAD", "runs/v1/manifest.json"),
    case("delete", "DELETE", "runs/v1/old.dcr"),
    case("create-multipart-upload", "POST", "runs/v1/big.bin", query=[("uploads", "")],
         headers=[("Content-Type", "application/octet-stream")]),
    case("upload-part", "PUT", "runs/v1/big.bin", query=[("partNumber", "1"), ("uploadId", UPLOAD_ID)], body=BODY),
    case("upload-part-10000", "PUT", "runs/v1/big.bin", query=[("uploadId", UPLOAD_ID), ("partNumber", "10000")],
         body=b"x"),
    case("complete-multipart-upload", "POST", "runs/v1/big.bin", query=[("uploadId", UPLOAD_ID)],
         headers=[("Content-Type", "application/xml")], body=COMPLETE),
    case("abort-multipart-upload", "DELETE", "runs/v1/big.bin", query=[("uploadId", UPLOAD_ID)]),
    case("list-objects-v2", "GET", "", query=[("list-type", "2"), ("prefix", "runs/v1/")]),
    case("list-objects-v2-encoded-prefix", "GET", "",
         query=[("list-type", "2"), ("prefix", "dir with space/ünï+co=de&x~y*z'(!)/")]),
    case("list-objects-v2-continuation", "GET", "",
         query=[("continuation-token", "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=+x"), ("list-type", "2"),
                ("prefix", "p/")]),
    case("list-objects-v2-empty-prefix", "GET", "", query=[("list-type", "2"), ("prefix", "")]),
    case("key-with-space", "GET", "dir with space/file name.bin"),
    case("key-with-unicode", "PUT", "ünïcödé/日本語/ключ.bin", body=b"unicode"),
    case("key-with-plus-equals-ampersand", "GET", "a+b=c&d/e;f:g@h$i,j"),
    case("key-with-reserved", "GET", "x~y_z.w-v*u'(t)!s%r#q?p[o]n"),
    case("key-with-double-slash-and-dots", "GET", "a//b/./c/../d"),
    case("virtual-host-aws", "GET", "runs/v1/a.bin", endpoint="https://s3.us-west-2.amazonaws.com", vhost=True,
         region="us-west-2"),
    case("virtual-host-put", "PUT", "k e+y.bin", endpoint="https://s3.eu-central-1.amazonaws.com", vhost=True,
         region="eu-central-1", body=BODY),
    case("virtual-host-list", "GET", "", endpoint="http://s3.localhost:4569", vhost=True,
         query=[("list-type", "2"), ("prefix", "a b/")]),
    case("path-style-default-https-port", "GET", "k", endpoint="https://minio.example.com:443"),
    case("path-style-default-http-port", "GET", "k", endpoint="http://minio.example.com:80/"),
    case("path-style-custom-port", "PUT", "k", endpoint="https://minio.example.com:9000", body=b"abc"),
    case("aws-default-endpoint", "GET", "k", endpoint="https://s3.ap-southeast-2.amazonaws.com", region="ap-southeast-2"),
    case("session-token-get", "GET", "runs/v1/a.bin", token=TOKEN),
    case("session-token-put", "PUT", "runs/v1/a.bin", token=TOKEN, body=BODY),
    case("session-token-multipart", "PUT", "runs/v1/a.bin", token=TOKEN,
         query=[("partNumber", "7"), ("uploadId", UPLOAD_ID)], body=BODY),
    case("other-date", "GET", "k", when=(2031, 12, 31, 0, 0, 0)),
    case("header-needing-trim", "GET", "k", headers=[("Range", "  bytes=0-9  ")]),
]


def botocore_url(c):
    parts = urlsplit(c["endpoint"])
    netloc = parts.netloc.rstrip("/")
    key = percent_encode(c["key"], safe="/~")
    if c["virtual_host"]:
        netloc, path = c["bucket"] + "." + netloc, "/" + key
    else:
        path = "/" + c["bucket"] + ("/" + key if c["key"] else "")
    # As botocore's REST serializer writes queries: flags (empty values) without '='.
    query = "&".join(percent_encode(n, safe="-_.~") + ("=" + percent_encode(v, safe="-_.~") if v else "")
                     for n, v in c["query"])
    return f"{parts.scheme}://{netloc}{path}" + ("?" + query if query else "")


class RecordingAuth(S3SigV4Auth):
    def canonical_request(self, request):
        self.recorded = super().canonical_request(request)
        return self.recorded


def botocore_sign(c):
    request = AWSRequest(method=c["method"], url=botocore_url(c), headers=dict(c["headers"]), data=c["body"])
    if c["unsigned_payload"]:
        request.context["client_config"] = Config(s3={"payload_signing_enabled": False})
    auth = RecordingAuth(Credentials(AK, SK, c["session_token"] or None), "s3", c["region"])
    with mock.patch("botocore.auth.datetime") as dt:
        dt.datetime.utcnow.return_value = datetime.datetime(*c["when"])
        auth.add_auth(request)
    return dict(url=request.url, authorization=request.headers["Authorization"], canonical_request=auth.recorded,
                amz_date=request.headers["X-Amz-Date"])


def split_url(url):
    """The parts of a URL that matter: an explicit default port and '=' after a flag do not."""
    parts = urlsplit(url)
    netloc = parts.netloc.removesuffix({"http": ":80", "https": ":443"}[parts.scheme])
    query = sorted((unquote(p.partition("=")[0]), unquote(p.partition("=")[2])) for p in parts.query.split("&") if p)
    return (parts.scheme, netloc, parts.path, query)


def run_tool(tool, cases, secret=SK):
    feed = []
    for c in cases:
        f = {k: v for k, v in c.items() if k not in ("body", "when")}
        f.update(body_hex=c["body"].hex(), access_key=AK, secret_key=secret, amz_date=c["amz_date"])
        feed.append(f)
    out = subprocess.run([tool], input=json.dumps(feed), capture_output=True, text=True, check=True)
    return {r["name"]: r for r in json.loads(out.stdout)}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tool = sys.argv[1]
    theirs = {}
    for c in CASES:
        theirs[c["name"]] = botocore_sign(c)
        c["amz_date"] = theirs[c["name"]]["amz_date"]
    ours = run_tool(tool, CASES)
    failures = 0
    for c in CASES:
        name, b, d = c["name"], theirs[c["name"]], ours[c["name"]]
        problems = []
        if d["authorization"] != b["authorization"]:
            problems.append(f"Authorization differs:\n  botocore: {b['authorization']}\n  dcr:      {d['authorization']}\n"
                            f"  botocore canonical request:\n{b['canonical_request']}\n"
                            f"  dcr canonical request:\n{d['canonical_request']}")
        if split_url(d["url"]) != split_url(b["url"]):
            problems.append(f"URL differs:\n  botocore: {b['url']}\n  dcr:      {d['url']}")
        if problems:
            failures += 1
            print(f"FAIL {name}: " + "\n".join(problems))
        else:
            print(f"ok   {name}: {d['url']}")
    # Negative control: a wrong secret must be noticed, so equality above means something.
    wrong = run_tool(tool, CASES[:1], secret=SK + "x")
    if wrong[CASES[0]["name"]]["authorization"] == theirs[CASES[0]["name"]]["authorization"]:
        print("FAIL negative control: a wrong secret key gave botocore's signature")
        failures += 1
    print(f"botocore {botocore.__version__}: {failures} disagreement(s) over {len(CASES)} requests")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
