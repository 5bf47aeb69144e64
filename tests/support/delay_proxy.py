"""A TCP proxy that adds a fixed one-way delay, for links where the kernel has no netem (Toxiproxy's idea).

Each direction has a queue: a reader stamps each chunk with the time it is due and goes on reading, a
writer sends the chunks in order once due. So the delay adds latency, not a pause per chunk, and a long
stream of small messages (HTTP/2, gRPC) flows at the link's rate. A bounded queue passes backpressure on.

    python -m tests.support.delay_proxy LISTEN_PORT TARGET_HOST:TARGET_PORT ONE_WAY_MS
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

QUEUED_CHUNKS = 1024


async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copies `reader` to `writer`, each chunk `delay` seconds after it arrived; an EOF is forwarded
    (as a half-close) with the same delay."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUED_CHUNKS)

    async def receive() -> None:
        while chunk := await reader.read(65536):
            await queue.put((loop.time() + delay, chunk))
        await queue.put((loop.time() + delay, b""))

    async def send() -> None:
        while True:
            due, chunk = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not chunk:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(chunk)
            await writer.drain()

    await asyncio.gather(receive(), send())


async def serve(listen_port: int, target: tuple[str, int], delay: float) -> None:
    async def connection(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*target)
        except OSError:
            client_writer.close()
            return
        try:
            async with asyncio.TaskGroup() as both_ways:
                both_ways.create_task(forward(client_reader, upstream_writer, delay))
                both_ways.create_task(forward(upstream_reader, client_writer, delay))
        except* OSError:
            pass  # a reset on either side ends the connection on both
        finally:
            for writer in (client_writer, upstream_writer):
                writer.close()

    server = await asyncio.start_server(connection, "0.0.0.0", listen_port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("listen_port", type=int)
    parser.add_argument("target", help="HOST:PORT")
    parser.add_argument("one_way_ms", type=float)
    args = parser.parse_args()
    host, port = args.target.rsplit(":", 1)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.listen_port, (host, int(port)), args.one_way_ms / 1000))


if __name__ == "__main__":
    main()
