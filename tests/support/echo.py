"""A TCP (and UDP) echo server and a client that streams numbered messages through it, for the network harness's
tests: the client checks every message comes back, in order, and prints what it saw as JSON.

    python -m tests.support.echo serve PORT
    python -m tests.support.echo client HOST PORT [--messages N] [--size BYTES] [--connect-timeout S] [--attempts K]

The client exits 3 when no connect succeeded (a partition), 1 when the echo was wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

NO_CONNECTION = 3


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while chunk := await reader.read(65536):
        writer.write(chunk)
        await writer.drain()
    writer.close()


class DatagramEcho(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.DatagramTransport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, address: tuple[str, int]) -> None:
        self.transport.sendto(data, address)


async def serve(port: int) -> None:
    """Echoes on TCP and UDP `port`: TCP for what retransmits, UDP to count what a lossy link lets through."""
    await asyncio.get_running_loop().create_datagram_endpoint(DatagramEcho, local_addr=("0.0.0.0", port))
    server = await asyncio.start_server(echo, "0.0.0.0", port)
    async with server:
        await server.serve_forever()


async def connect(host: str, port: int, connect_timeout: float, attempts: int):
    """A connection, trying `attempts` times (a fresh SYN each time, quicker than the kernel's 1 s
    retransmit when packets are lost); None if none succeeded."""
    for _ in range(attempts):
        try:
            return await asyncio.wait_for(asyncio.open_connection(host, port), connect_timeout)
        except (TimeoutError, OSError):
            continue
    return None


def message(number: int, size: int) -> bytes:
    return f"{number} ".encode().ljust(size - 1, b".") + b"\n"


async def client(
    host: str, port: int, messages: int, size: int, connect_timeout: float, attempts: int
) -> int:
    connection = await connect(host, port, connect_timeout, attempts)
    if connection is None:
        print(f"no connection to {host}:{port} after {attempts} x {connect_timeout} s", file=sys.stderr)
        return NO_CONNECTION
    reader, writer = connection
    started = time.perf_counter()
    writer.write(message(0, size))
    first = await reader.readline()
    round_trip = time.perf_counter() - started

    async def send() -> None:
        for number in range(1, messages):
            writer.write(message(number, size))
            await writer.drain()
        writer.write_eof()

    async def receive() -> list[bytes]:
        return [await reader.readline() for _ in range(1, messages)]

    _, echoed = await asyncio.gather(send(), receive())
    in_order = [first, *echoed] == [message(number, size) for number in range(messages)]
    closed = await reader.read() == b""
    writer.close()
    print(json.dumps({"round_trip_ms": round_trip * 1000, "messages": messages, "in_order": in_order}))
    return 0 if in_order and closed else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("serve").add_argument("port", type=int)
    talk = commands.add_parser("client")
    talk.add_argument("host")
    talk.add_argument("port", type=int)
    talk.add_argument("--messages", type=int, default=1)
    talk.add_argument("--size", type=int, default=16, help="bytes per message, newline included")
    talk.add_argument("--connect-timeout", type=float, default=5.0)
    talk.add_argument("--attempts", type=int, default=1)
    args = parser.parse_args()
    if args.command == "serve":
        asyncio.run(serve(args.port))
    else:
        code = asyncio.run(
            client(args.host, args.port, args.messages, args.size, args.connect_timeout, args.attempts)
        )
        sys.exit(code)


if __name__ == "__main__":
    main()
