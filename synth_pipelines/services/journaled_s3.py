"""The production deployment's S3-compatible server: moto's, with its buckets kept on disk.

moto keeps buckets in memory, which alone would lose every object of a deployment whose
control database (on disk) still points at them. moto's request recorder appends each
request it serves to a journal file, before serving it; at start this server replays the
journal's writes into itself before it listens, so a restart (or a crash) keeps every
object. Reads are dropped from the journal as it is replayed: they change nothing, and
would make every start slower. A multipart upload gets a new id when replayed; later
requests of that upload are sent with the new one.

moto, not a file-backed server, because it honours what the object store relies on:
`If-None-Match: *` (create-only writes) and the SHA-256 checksum header (which moto stores,
and the layer in front of it checks against the body).

The port it listens on serves only requests signed (Signature Version 4, in the header or a
presigned URL's query) with the deployment's key pair, `AWS_ACCESS_KEY_ID` and
`AWS_SECRET_ACCESS_KEY` in its environment (`s3_signatures.py`); every other request is
refused with 403 and changes nothing. The journal is replayed, unchecked, through a private
port before that one opens: its requests were checked when first served, and most of their
signatures have gone stale since.

    AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... \
    python -m synth_pipelines.services.journaled_s3 --host 127.0.0.1 --port 9000 --journal F
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import signal
import threading
from collections import defaultdict, deque
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx

from synth_pipelines.services.s3_signatures import S3Credentials, SignatureCheck

WRITES = frozenset({"PUT", "POST", "DELETE"})
_UPLOAD_ID = re.compile(r"<UploadId>([^<]+)</UploadId>")
# Set by the client's connection, not part of the request's meaning.
_HOP_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def compact(journal: Path) -> int:
    """Keep only the requests that change state, in order; returns how many remain."""
    if not journal.exists():
        journal.parent.mkdir(parents=True, exist_ok=True)
        journal.touch()
        return 0
    kept = [
        line
        for line in journal.read_text().splitlines()
        if line.strip() and json.loads(line).get("method") in WRITES
    ]
    scratch = journal.with_name(journal.name + ".compacting")
    scratch.write_text("".join(f"{line}\n" for line in kept))
    os.replace(scratch, journal)
    return len(kept)


def replay(journal: Path, endpoint: str) -> None:
    """Send the journal's requests to `endpoint`, in order, as they were first sent."""
    new_ids: dict[str, deque[str]] = defaultdict(deque)  # per path, uploads created
    renamed: dict[str, str] = {}  # an upload's recorded id -> its id on this server
    with httpx.Client(base_url=endpoint, timeout=60) as client:
        for line in journal.read_text().splitlines():
            entry = json.loads(line)
            url = urlsplit(entry["url"])
            target = url.path + (f"?{url.query}" if url.query else "")
            old_id = parse_qs(url.query).get("uploadId", [None])[0]
            if old_id is not None:
                if old_id not in renamed and new_ids[url.path]:
                    renamed[old_id] = new_ids[url.path].popleft()
                target = target.replace(old_id, renamed.get(old_id, old_id))
            body = entry.get("body") or b""
            if entry.get("body_encoded"):
                body = base64.b64decode(body)
            headers = {
                name: value
                for name, value in entry["headers"].items()
                if name.lower() not in _HOP_HEADERS
            }
            response = client.request(entry["method"], target, headers=headers, content=body)
            if entry["method"] == "POST" and "uploads" in parse_qs(
                url.query, keep_blank_values=True
            ):
                created = _UPLOAD_ID.search(response.text)
                if created:
                    new_ids[url.path].append(created.group(1))


def credentials_from_environment() -> S3Credentials:
    """The key pair the deployment's clients sign with, from the variables they read."""
    access_key_id = os.environ.get("AWS_ACCESS_KEY_ID")
    secret_access_key = os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not access_key_id or not secret_access_key:
        raise SystemExit(
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to the deployment's (its "
            "deployment.env): the server accepts only requests signed with them"
        )
    return S3Credentials(access_key_id, secret_access_key)


def serve(host: str, port: int, journal: Path, credentials: S3Credentials) -> None:
    # The recorder reads both variables when moto is first imported.
    os.environ["MOTO_RECORDER_FILEPATH"] = str(journal)
    os.environ["MOTO_ENABLE_RECORDING"] = "true"
    from moto.core.request import PRESERVED_HEADER_NAMES_ENVIRON_KEY
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from moto.server import ThreadedMotoServer
    from werkzeug.serving import make_server

    writes = compact(journal)
    # Replayed through a private port first: the public one opens only once every
    # object is back, so whoever sees it answer sees the whole bucket.
    private = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    private.start()
    private_host, private_port = private.get_host_and_port()
    # The recorder writes the journal only for the public server's requests, not these.
    from moto.moto_api import recorder

    recorder.stop_recording()
    replay(journal, f"http://{private_host}:{private_port}")
    recorder.start_recording()
    private.stop()
    print(f"replayed {writes} writes from {journal}", flush=True)

    # moto's buckets are the process's: the public app serves the ones replayed into them.
    checked = SignatureCheck(
        DomainDispatcherApplication(create_backend_app),
        credentials,
        PRESERVED_HEADER_NAMES_ENVIRON_KEY,
    )
    public = make_server(host, port, checked, threaded=True, request_handler=MotoRequestHandler)
    threading.Thread(target=public.serve_forever, daemon=True).start()
    print(f"S3-compatible server on http://{host}:{port}, signatures checked", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    stopped.wait()
    public.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--journal", type=Path, required=True)
    args = parser.parse_args()
    serve(args.host, args.port, args.journal, credentials_from_environment())


if __name__ == "__main__":
    main()
