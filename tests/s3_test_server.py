"""moto's S3 server with S3's atomic conditional writes, for the test command.

S3 (and MinIO) decide a conditional write (`If-None-Match: *`, `If-Match: <etag>`) and a
conditional delete atomically: of two racing writes of a key, exactly one wins. moto's server
checks the condition and then writes, each request on its own thread, so two racing commits can
both see no object and both succeed. The commit protocol is built on that atomicity, and its
tests race commits on purpose: this server takes one lock around every request that changes an
object (PUT, POST, DELETE of a key), so each check and its write happen together. Reads run
beside them as before.

Arguments are moto's server's (`-H 127.0.0.1 -p PORT`).
"""

import sys
import threading

from moto.s3.responses import S3Response
from moto.server import main

WRITES = {"PUT", "POST", "DELETE"}
_lock = threading.Lock()
_key_response = S3Response.key_response


def key_response_atomically(self, request, full_url, headers):
    """Answers a request of a key, under the lock when it changes the object."""
    if request.method in WRITES:
        with _lock:
            return _key_response(self, request, full_url, headers)
    return _key_response(self, request, full_url, headers)


S3Response.key_response = key_response_atomically

if __name__ == "__main__":
    main(sys.argv[1:])
