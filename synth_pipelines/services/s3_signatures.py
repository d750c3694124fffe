"""Signature Version 4 checked in front of the deployment's S3-compatible server.

moto's own authentication is no check here: turned on (`INITIAL_NO_AUTH_ACTION_COUNT`), it
knows only the access keys its IAM mock mints, never the deployment's, compares signatures
with `!=`, and verifies no presigned URL at all (one without an `Authorization` header is
served unchecked). So this WSGI layer recomputes every request's signature with botocore's
signer, under the one key pair the deployment gives its clients, and compares the two in
constant time; moto sees only the requests that pass. Both ways of signing are checked: the
`Authorization` header, and a presigned URL's query (`X-Amz-Signature`, valid until its
`X-Amz-Expires`). A refused request never reaches moto, so it changes nothing and is not
written to the journal.

The payload is checked too: a request that declares its body's SHA-256
(`x-amz-content-sha256`, signed) is refused unless the body has it, so a captured request
cannot carry other bytes. `UNSIGNED-PAYLOAD` is accepted, as S3 accepts it; the streaming,
per-chunk-signed payloads are refused (botocore does not send them to an `http` endpoint).
The object store's SHA-256 checksum header (`x-amz-checksum-sha256`) is checked against the
body here as S3 checks it (`BadDigest`), since moto only stores it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import io
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit, urlunsplit
from xml.sax.saxutils import escape

from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from werkzeug.wrappers import Request, Response

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

ALGORITHM = "AWS4-HMAC-SHA256"
# S3's own bounds: a signed request's clock may be 15 minutes off the server's, and a
# presigned URL lives at most a week.
MAX_SKEW = timedelta(minutes=15)
MAX_EXPIRES_SEC = 7 * 24 * 3600
# aws-chunked bodies: their checksum is in a trailer, not in a header.
STREAMING_PAYLOADS = frozenset({"STREAMING-UNSIGNED-PAYLOAD-TRAILER"})
UNSIGNED_PAYLOADS = frozenset({"UNSIGNED-PAYLOAD", *STREAMING_PAYLOADS})
_AMZ_DATE = "%Y%m%dT%H%M%SZ"
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")
_AUTHORIZATION_FIELD = re.compile(r"(Credential|SignedHeaders|Signature)=([^,\s]+)")


@dataclass(frozen=True)
class S3Credentials:
    """The one key pair the server accepts: the deployment's `AWS_ACCESS_KEY_ID` and
    `AWS_SECRET_ACCESS_KEY`, which every platform process's S3 client signs with."""

    access_key_id: str
    secret_access_key: str


class SignatureRefusedError(Exception):
    """The request is not signed by the deployment's key pair; `code` is S3's name for why."""

    def __init__(self, code: str, message: str, status: int = 403):
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass(frozen=True)
class IncomingRequest:
    """A request as its client sent and signed it: the path and query undecoded. The body is
    not here: it is read only once the signature is checked, so an unsigned request cannot
    make the server hold a body of any size."""

    method: str
    url: str
    headers: dict[str, str]  # lower-case names

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.url).query, keep_blank_values=True)


@dataclass(frozen=True)
class _Scope:
    access_key_id: str
    date: str
    region: str
    service: str

    @classmethod
    def parse(cls, credential: str) -> _Scope:
        parts = credential.split("/")
        if len(parts) != 5 or parts[4] != "aws4_request":
            raise SignatureRefusedError(
                "AuthorizationHeaderMalformed",
                f"the credential {credential!r} is not KEY/DATE/REGION/SERVICE/aws4_request",
                400,
            )
        return cls(*parts[:4])


def check_signature(request: IncomingRequest, credentials: S3Credentials) -> None:
    """Return when `request` is signed with `credentials`; else `SignatureRefusedError`."""
    now = datetime.now(UTC)
    if "authorization" in request.headers:
        _check_header_signed(request, credentials, now)
    elif "X-Amz-Signature" in request.query:
        _check_query_signed(request, credentials, now)
    elif "Signature" in request.query:
        raise SignatureRefusedError(
            "AccessDenied",
            "Signature Version 2 is not accepted; presign with Signature Version 4 "
            "(botocore: Config(signature_version='s3v4'))",
        )
    else:
        raise SignatureRefusedError(
            "AccessDenied", "Access Denied: the request is not signed (no credentials)"
        )


def _check_header_signed(
    request: IncomingRequest, credentials: S3Credentials, now: datetime
) -> None:
    authorization = request.headers["authorization"]
    fields = dict(_AUTHORIZATION_FIELD.findall(authorization))
    if not authorization.startswith(f"{ALGORITHM} ") or len(fields) != 3:
        raise SignatureRefusedError(
            "AuthorizationHeaderMalformed",
            f"the Authorization header is not {ALGORITHM} Credential=..., SignedHeaders=..., "
            "Signature=...",
            400,
        )
    scope = _Scope.parse(fields["Credential"])
    timestamp = request.headers.get("x-amz-date", "")
    signed_at = _parse_amz_date(timestamp)
    _check_scope(scope, timestamp, credentials)
    if abs(now - signed_at) > MAX_SKEW:
        raise SignatureRefusedError(
            "RequestTimeTooSkewed",
            f"the request was signed at {timestamp}, more than {MAX_SKEW} from the server's "
            f"time {now:{_AMZ_DATE}}",
        )
    signed_headers = fields["SignedHeaders"].split(";")
    _require_signed(signed_headers, ("host", "x-amz-content-sha256"))
    auth = S3SigV4Auth(_as_botocore(credentials), scope.service, scope.region)
    signable = _signable(request, request.url, signed_headers, timestamp)
    _compare(auth, signable, fields["Signature"])


def _check_query_signed(
    request: IncomingRequest, credentials: S3Credentials, now: datetime
) -> None:
    query = {name: values[-1] for name, values in request.query.items()}
    if query.get("X-Amz-Algorithm") != ALGORITHM:
        raise SignatureRefusedError(
            "AuthorizationQueryParametersError", f"X-Amz-Algorithm must be {ALGORITHM}", 400
        )
    try:
        expires = int(query["X-Amz-Expires"])
        scope = _Scope.parse(query["X-Amz-Credential"])
        timestamp = query["X-Amz-Date"]
        signed_headers = query["X-Amz-SignedHeaders"].split(";")
    except (KeyError, ValueError):
        raise SignatureRefusedError(
            "AuthorizationQueryParametersError",
            "a presigned URL needs X-Amz-Credential, X-Amz-Date, X-Amz-Expires (seconds) and "
            "X-Amz-SignedHeaders",
            400,
        ) from None
    signed_at = _parse_amz_date(timestamp)
    _check_scope(scope, timestamp, credentials)
    _require_signed(signed_headers, ("host",))
    if not 1 <= expires <= MAX_EXPIRES_SEC:
        raise SignatureRefusedError(
            "AuthorizationQueryParametersError",
            f"X-Amz-Expires must be 1 to {MAX_EXPIRES_SEC} seconds, not {expires}",
            400,
        )
    if signed_at - now > MAX_SKEW:
        raise SignatureRefusedError(
            "AccessDenied", f"the presigned URL is dated {timestamp}, in the future"
        )
    if now > signed_at + timedelta(seconds=expires):
        raise SignatureRefusedError(
            "AccessDenied", f"Request has expired: the URL signed at {timestamp} lived {expires} s"
        )
    auth = S3SigV4QueryAuth(_as_botocore(credentials), scope.service, scope.region, expires)
    # The signature is computed over the query without itself.
    unsigned_url = _without_query_parameter(request.url, "X-Amz-Signature")
    signable = _signable(request, unsigned_url, signed_headers, timestamp)
    _compare(auth, signable, query["X-Amz-Signature"])


def _require_signed(signed_headers: list[str], required: Iterable[str]) -> None:
    for name in required:
        if name not in signed_headers:
            raise SignatureRefusedError("InvalidRequest", f"the {name} header must be signed", 400)


def _check_scope(scope: _Scope, timestamp: str, credentials: S3Credentials) -> None:
    if not hmac.compare_digest(scope.access_key_id.encode(), credentials.access_key_id.encode()):
        raise SignatureRefusedError(
            "InvalidAccessKeyId",
            f"the access key {scope.access_key_id!r} is not the deployment's "
            "(AWS_ACCESS_KEY_ID in its deployment.env)",
        )
    if scope.service != "s3":
        raise SignatureRefusedError(
            "AccessDenied", f"this server serves S3 only, not {scope.service!r}"
        )
    if scope.date != timestamp[:8]:
        raise SignatureRefusedError(
            "SignatureDoesNotMatch",
            f"the credential's date {scope.date} is not the signing date {timestamp[:8]}",
        )


def _compare(auth: S3SigV4Auth, signable: AWSRequest, presented: str) -> None:
    canonical = auth.canonical_request(signable)
    expected = auth.signature(auth.string_to_sign(signable, canonical), signable)
    if not hmac.compare_digest(str(expected).encode(), presented.encode()):
        raise SignatureRefusedError(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided: "
            "check the secret key (AWS_SECRET_ACCESS_KEY in the deployment's deployment.env)",
        )


def check_payload(request: IncomingRequest, body: bytes) -> None:
    """Return when `body` is what the signed request says it is; else
    `SignatureRefusedError`."""
    declared = request.headers.get("x-amz-content-sha256")
    checksum = request.headers.get("x-amz-checksum-sha256")
    if declared not in STREAMING_PAYLOADS and checksum is not None:
        # moto stores this checksum without computing it; S3 refuses a body that differs.
        actual = base64.b64encode(hashlib.sha256(body).digest()).decode()
        if not hmac.compare_digest(actual.encode(), checksum.encode()):
            raise SignatureRefusedError(
                "BadDigest", "The SHA256 you specified did not match the calculated checksum.", 400
            )
    if declared is None or declared in UNSIGNED_PAYLOADS:
        return
    if not _HEX_DIGEST.fullmatch(declared):
        raise SignatureRefusedError(
            "InvalidRequest",
            f"x-amz-content-sha256 {declared!r} is not accepted: send the body's SHA-256 "
            "(hex) or UNSIGNED-PAYLOAD",
            400,
        )
    if not hmac.compare_digest(hashlib.sha256(body).hexdigest(), declared):
        raise SignatureRefusedError(
            "XAmzContentSHA256Mismatch",
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
            400,
        )


def _signable(
    request: IncomingRequest, url: str, signed_headers: Iterable[str], timestamp: str
) -> AWSRequest:
    """The request as botocore would have signed it: only the headers the client signed."""
    headers = {}
    for name in signed_headers:
        if name not in request.headers:
            raise SignatureRefusedError(
                "SignatureDoesNotMatch", f"the signed header {name!r} was not sent"
            )
        headers[name] = request.headers[name]
    signable = AWSRequest(method=request.method, url=url, headers=headers)
    signable.context["timestamp"] = timestamp
    return signable


def _parse_amz_date(timestamp: str) -> datetime:
    try:
        return datetime.strptime(timestamp, _AMZ_DATE).replace(tzinfo=UTC)
    except ValueError:
        raise SignatureRefusedError(
            "AccessDenied", f"X-Amz-Date {timestamp!r} is missing or not YYYYMMDDTHHMMSSZ"
        ) from None


def _without_query_parameter(url: str, name: str) -> str:
    parts = urlsplit(url)
    kept = [pair for pair in parts.query.split("&") if pair.partition("=")[0] != name]
    return urlunsplit(parts._replace(query="&".join(kept)))


def _as_botocore(credentials: S3Credentials) -> Credentials:
    return Credentials(credentials.access_key_id, credentials.secret_access_key)


def incoming_request(environ: WSGIEnvironment, preserved_names: dict[str, str]) -> IncomingRequest:
    """The request of `environ`. `preserved_names` maps an environ key to the header name as
    sent, where the server kept it (moto's request handler keeps names with underscores,
    such as metadata keys)."""
    headers = {
        preserved_names.get(key, key.removeprefix("HTTP_").replace("_", "-")).lower(): value
        for key, value in environ.items()
        if key.startswith("HTTP_") or key in ("CONTENT_TYPE", "CONTENT_LENGTH")
    }
    # The path and query exactly as sent: the signature covers their encoding.
    target = urlsplit(environ.get("RAW_URI") or environ.get("PATH_INFO", "/"))
    url = urlunsplit(("http", headers.get("host", ""), target.path, target.query, ""))
    return IncomingRequest(environ["REQUEST_METHOD"], url, headers)


def read_body(environ: WSGIEnvironment) -> bytes:
    """The request's body, read whole and left in `environ` for the app to read again."""
    body = Request(environ).get_data()
    environ["wsgi.input"] = io.BytesIO(body)
    if body or "CONTENT_LENGTH" in environ:
        # A chunked body is whole now: moto's journal records as many bytes as this says.
        environ["CONTENT_LENGTH"] = str(len(body))
    return body


class SignatureCheck:
    """A WSGI app serving `app` to the requests signed with `credentials`, and S3's XML
    error to every other. moto's management API (`/moto-api/`: reset every bucket, stop the
    journal) is refused however a request is signed: clients reach the S3 API only."""

    def __init__(self, app: WSGIApplication, credentials: S3Credentials, preserved_names_key: str):
        self.app = app
        self.credentials = credentials
        self.preserved_names_key = preserved_names_key

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        request = incoming_request(environ, environ.get(self.preserved_names_key, {}))
        try:
            if urlsplit(request.url).path.startswith("/moto-api"):
                raise SignatureRefusedError(
                    "AccessDenied", "the deployment's S3 server serves the S3 API only"
                )
            check_signature(request, self.credentials)
            check_payload(request, read_body(environ))
        except SignatureRefusedError as refused:
            return s3_error(refused, urlsplit(request.url).path)(environ, start_response)
        return self.app(environ, start_response)


def s3_error(refused: SignatureRefusedError, resource: str) -> Response:
    """S3's error document, as its clients parse it."""
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{refused.code}</Code><Message>{escape(refused.message)}</Message>"
        f"<Resource>{escape(resource)}</Resource><RequestId>{uuid.uuid4().hex}</RequestId>"
        "</Error>"
    )
    return Response(body, status=refused.status, content_type="application/xml")
