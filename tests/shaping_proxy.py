"""A TCP proxy that makes a local S3 server answer as S3 answers a Lambda function.

Every response's first byte waits a first-byte latency (drawn between --min-latency-ms and
--max-latency-ms, 20 and 50 by default, from a seeded generator), and the bytes of every
connection, in both directions, share one bandwidth (--mbps, 80 MB/s by default): what one
function gets from S3 in all. A request is known by bytes arriving from the client after the
last response bytes; its response's first bytes wait the latency.

    python tests/shaping_proxy.py --listen-port P --upstream-port Q [--mbps 80]
        [--min-latency-ms 20] [--max-latency-ms 50] [--seed 1]

It prints `listening on PORT` once it accepts connections (port 0 picks a free one). SIGTERM or
SIGINT stops it; on exit it prints the bytes it forwarded and the CPU seconds it used.
"""

import argparse
import asyncio
import random
import resource
import signal
import sys
import time

CHUNK = 256 * 1024


class Shaper:
    """One bandwidth shared by every connection: each chunk waits for its turn on the wire."""

    def __init__(self, bytes_per_second, min_latency, max_latency, seed):
        self.rate = bytes_per_second
        self.next_free = 0.0
        self.random = random.Random(seed)
        self.min_latency = min_latency
        self.max_latency = max_latency
        self.forwarded = 0

    async def transfer(self, n):
        """Waits until `n` bytes have had their time on the shared wire."""
        now = time.monotonic()
        start = max(now, self.next_free)
        self.next_free = start + n / self.rate
        self.forwarded += n
        delay = self.next_free - now
        if delay > 0:
            await asyncio.sleep(delay)

    def latency(self):
        return self.random.uniform(self.min_latency, self.max_latency)


async def pump(reader, writer, shaper, connection, is_response):
    """Copies one direction of a connection through the shaper."""
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            if is_response and connection["request_pending"]:
                connection["request_pending"] = False
                await asyncio.sleep(shaper.latency())
            if not is_response:
                connection["request_pending"] = True
            await shaper.transfer(len(data))
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def serve(args):
    shaper = Shaper(
        args.mbps * 1_000_000,
        args.min_latency_ms / 1000,
        args.max_latency_ms / 1000,
        args.seed,
    )

    async def handle(client_reader, client_writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(args.upstream_host, args.upstream_port)
        except OSError:
            client_writer.close()
            return
        connection = {"request_pending": False}
        await asyncio.gather(
            pump(client_reader, up_writer, shaper, connection, False),
            pump(up_reader, client_writer, shaper, connection, True),
        )

    server = await asyncio.start_server(handle, "127.0.0.1", args.listen_port)
    port = server.sockets[0].getsockname()[1]
    print(f"listening on {port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"forwarded {shaper.forwarded} bytes, {usage.ru_utime + usage.ru_stime:.2f} CPU seconds",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen-port", type=int, default=0)
    parser.add_argument("--upstream-host", default="127.0.0.1")
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--mbps", type=float, default=80.0, help="MB/s shared by all connections")
    parser.add_argument("--min-latency-ms", type=float, default=20.0)
    parser.add_argument("--max-latency-ms", type=float, default=50.0)
    parser.add_argument("--seed", type=int, default=1)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
