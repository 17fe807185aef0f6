"""A local S3 to try and test remote stores offline: moto's server behind a latency proxy.

``python -m lading.testing`` (or :class:`LocalS3` from Python) starts moto's
S3 server on loopback and, in front of it, a proxy that gives every request a latency of
``latency ± jitter`` seconds (30 ± 10 ms by default, a real S3 GET's shape), counts requests
(GETs, their bytes, the most in flight at once) and injects faults on request (a GET that
fails N times, a slow GET, a short one, a connection reset, a request never answered: the
half-open server). Point any client at the proxy (``AWS_ENDPOINT_URL``).

moto copies an object's whole value for each ranged GET (measured here: 258 GETs/s on a
1 MiB object, 22 GETs/s on a 64 MiB one), so a benchmark would measure moto, not the client.
The proxy therefore answers object GETs (ranged or whole, with ``If-Match``) from its own
copy of each object, fetched whole from moto once and dropped when a PUT, POST or DELETE
through the proxy touches the bucket. Everything else (PUT, HEAD, list, multipart) goes to
moto. Writes made around the proxy, straight to moto, are not seen by its copies.

Control (no latency): ``GET /_lading/stats``, ``POST /_lading/reset``, ``POST /_lading/faults``
with ``{"match": "text.bin", "times": 3, "kind": "error" | "slow" | "short" | "reset" |
"hang", "op": "get" | "list" | "head" | "put" | "any", "status": 503, "delay": 5.0}``
(``op``: which requests the rule hits, default object GETs; ``reset`` closes the connection
with a TCP RST; ``hang`` never answers), ``POST /_lading/latency`` with ``{"latency": 0.03,
"jitter": 0.01}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import random
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")
_HOP = {"transfer-encoding", "connection", "content-length", "content-encoding", "keep-alive"}
_START_S = 120.0  # how long LocalS3 waits for its server's first line
_KEEP = ("ETag", "Last-Modified", "Content-Type")
_PARTIAL = {"range", "if-match", "if-none-match", "if-modified-since", "if-unmodified-since"}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Proxy:
    """The proxy's state: latency, counters, fault rules, copies of objects."""

    def __init__(self, upstream: str, latency: float, jitter: float, mirror: Path) -> None:
        self.upstream, self.latency, self.jitter = upstream, latency, jitter
        self.mirror = mirror
        self.copies: dict[str, tuple[Path, int, dict[str, str]]] = {}
        self.loading: dict[str, asyncio.Future[None]] = {}
        self.faults: list[dict[str, Any]] = []
        self.reset()

    def reset(self) -> None:
        self.counts: dict[str, Any] = {
            "requests": 0,
            "gets": 0,
            "get_bytes": 0,
            "heads": 0,
            "puts": 0,
            "lists": 0,
            "in_flight": 0,
            "max_in_flight": 0,
            "faults": 0,
            "gets_by_key": {},
            "get_bytes_by_key": {},
        }

    async def handle(self, request: Any) -> Any:
        from aiohttp import web

        if request.path.startswith("/_lading/"):
            return await self.control(request)
        c = self.counts
        c["requests"] += 1
        c["in_flight"] += 1
        c["max_in_flight"] = max(c["max_in_flight"], c["in_flight"])
        try:
            await asyncio.sleep(max(0.0, random.uniform(-1, 1) * self.jitter + self.latency))
            if (
                request.method == "GET"
                and not request.query_string
                and request.path.count("/") >= 2
            ):
                return await self.get(request)
            op = {"GET": "list", "HEAD": "head"}.get(request.method, "put")
            fault = self.fault_for(request.path_qs, op, request.headers)
            if fault is not None:
                answer = await self.inject(fault, request)
                if answer is not None:
                    return answer
            if request.method == "GET":
                c["lists"] += 1
            elif request.method == "HEAD":
                c["heads"] += 1
            else:
                c["puts"] += 1
                bucket = request.path.strip("/").split("/", 1)[0]
                for name in [n for n in self.copies if n.split("/", 1)[0] == bucket]:
                    self.copies.pop(name)[0].unlink(missing_ok=True)
            return await self.forward(request)
        except Exception as e:  # report, do not hang the client
            return web.Response(status=500, text=f"lading local S3 proxy: {e}")
        finally:
            c["in_flight"] -= 1

    async def get(self, request: Any) -> Any:
        from aiohttp import web

        name = request.path.strip("/")
        c = self.counts
        c["gets"] += 1
        c["gets_by_key"][name] = c["gets_by_key"].get(name, 0) + 1
        fault = self.fault_for(name, "get")
        if fault is not None:
            answer = await self.inject(fault, request)
            if answer is not None:
                return answer
        copy = await self.copy_of(name, request)
        if not isinstance(copy, tuple):
            return copy  # moto's answer (404, ...)
        path, size, headers = copy
        wanted = request.headers.get("If-Match")
        if wanted is not None and wanted.strip('"') != headers.get("ETag", "").strip('"'):
            return web.Response(status=412, text="PreconditionFailed")
        start, end, status = 0, size, 200
        if "Range" in request.headers:
            found = _RANGE.match(request.headers["Range"].strip())
            if found is None:
                return web.Response(status=416)
            first, last = found.groups()
            start, end = (size - int(last), size) if not first else (int(first), size)
            if first and last:
                end = min(size, int(last) + 1)
            if start >= size or start < 0:
                return web.Response(status=416, headers={"Content-Range": f"bytes */{size}"})
            status = 206
        with open(path, "rb") as f:
            body = os.pread(f.fileno(), end - start, start)
        if fault is not None and fault["kind"] == "short":
            body = body[: len(body) // 2]
        c["get_bytes"] += len(body)
        c["get_bytes_by_key"][name] = c["get_bytes_by_key"].get(name, 0) + len(body)
        out = dict(headers)
        if status == 206:
            out["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        out["Accept-Ranges"] = "bytes"
        return web.Response(status=status, body=body, headers=out)

    async def inject(self, fault: dict[str, Any], request: Any) -> Any:
        """Act a fault out: an answer to send (an error), or None to go on (slow, short)."""
        from aiohttp import web

        kind = fault["kind"]
        if kind == "error":
            return web.Response(status=int(fault.get("status", 503)), text="injected fault")
        if kind == "slow":
            await asyncio.sleep(float(fault.get("delay", 5.0)))
        elif kind == "hang":  # the half-open server: the connection stays, no answer comes
            await asyncio.sleep(float(fault.get("delay", 3600.0)))
        elif kind == "reset":
            transport = request.transport
            if transport is not None:
                sock = transport.get_extra_info("socket")
                if sock is not None:  # linger 0: close() sends a RST, not a FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                transport.abort()
            return web.Response(status=500, text="injected reset")  # never sent: it is gone
        return None

    def fault_for(self, name: str, op: str = "get", headers: Any = None) -> dict[str, Any] | None:
        for rule in self.faults:
            if rule.get("op", "get") not in (op, "any"):
                continue
            if rule.get("header") and rule["header"] not in (headers or {}):
                continue  # aimed at requests carrying that header only
            if rule["times"] > 0 and rule["match"] in name:
                rule["times"] -= 1
                self.counts["faults"] += 1
                return rule
        return None

    async def copy_of(self, name: str, request: Any) -> Any:
        """``(file, size, headers)`` of this proxy's copy of object ``name`` (fetched from
        moto on first use), or moto's response when it has no such object."""
        while name in self.loading:
            await self.loading[name]
        if name in self.copies:
            return self.copies[name]
        import aiohttp

        self.loading[name] = asyncio.get_running_loop().create_future()
        try:
            whole = {k: v for k, v in _signed(request).items() if k.lower() not in _PARTIAL}
            async with (
                aiohttp.ClientSession() as session,
                session.get(
                    _upstream(self.upstream, request, query=False), headers=whole
                ) as response,
            ):
                body = await response.read()
                if response.status != 200:
                    return _answer(response, body)
                path = self.mirror / hashlib.sha256(name.encode()).hexdigest()
                path.write_bytes(body)
                kept = {k: response.headers[k] for k in _KEEP if k in response.headers}
                self.copies[name] = (path, len(body), kept)
                return self.copies[name]
        finally:
            self.loading.pop(name).set_result(None)

    async def forward(self, request: Any) -> Any:
        import aiohttp

        body = await request.read()
        url = _upstream(self.upstream, request)
        async with (
            aiohttp.ClientSession(auto_decompress=False) as session,
            session.request(
                request.method, url, data=body, headers=_signed(request), allow_redirects=False
            ) as response,
        ):
            return _answer(response, await response.read())

    async def control(self, request: Any) -> Any:
        from aiohttp import web

        what = request.path.removeprefix("/_lading/")
        if what == "stats":
            return web.json_response(self.counts)
        body = await request.json() if request.can_read_body else {}
        if what == "reset":
            self.reset()
            self.faults.clear()
        elif what == "faults":
            self.faults.append({"kind": "error", "times": 1, "match": "", **body})
        elif what == "latency":
            self.latency = float(body.get("latency", self.latency))
            self.jitter = float(body.get("jitter", self.jitter))
        else:
            return web.Response(status=404, text=f"no control {what!r}")
        return web.json_response({"ok": True})


def _signed(request: Any) -> dict[str, str]:
    """The request's headers for moto (moto does not check signatures; Host stays as sent)."""
    return {k: v for k, v in request.headers.items() if k.lower() not in _HOP}


def _answer(response: Any, body: bytes) -> Any:
    from aiohttp import web

    headers = {k: v for k, v in response.headers.items() if k.lower() not in _HOP}
    if response.method == "HEAD":  # no body, but the object's length is the answer
        headers["Content-Length"] = response.headers.get("Content-Length", "0")
        return web.Response(status=response.status, headers=headers)
    return web.Response(status=response.status, body=body, headers=headers)


async def _serve(listener: socket.socket, latency: float, jitter: float, ready: Any) -> None:
    import logging

    from aiohttp import web
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto logs every request otherwise
    # Port 0: the kernel picks a port as it binds. A port found free earlier can be taken by
    # the time it is bound, and moto's thread then dies while start() waits for it for ever.
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, moto_port = moto.get_host_and_port()
    with tempfile.TemporaryDirectory(prefix="lading-s3-") as mirror:
        proxy = _Proxy(f"http://{host}:{moto_port}", latency, jitter, Path(mirror))
        app = web.Application(client_max_size=1 << 34)
        app.router.add_route("*", "/{tail:.*}", proxy.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.SockSite(runner, listener)
        await site.start()
        ready(f"http://127.0.0.1:{listener.getsockname()[1]}")
        stop = asyncio.Event()  # LocalS3 ends this process by SIGTERM: unwind, so that the
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)  # mirror goes
        try:
            await stop.wait()
        finally:
            await runner.cleanup()
            moto.stop()


def need_packages() -> None:
    """Refuse, naming the extra, where moto's server or aiohttp is missing (else the server's
    child dies on an import and the parent says only that it did not start)."""
    import importlib.util

    missing = [m for m in ("moto", "flask", "aiohttp") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"the local S3 needs {', '.join(missing)}. To install:\n  pip install 'lading[s3local]'"
        )


class LocalS3:
    """A local S3 (moto + the latency proxy) in a child process, for tests and benchmarks.

    ``with LocalS3() as s3:`` sets ``AWS_ENDPOINT_URL`` and test credentials in this
    process's environment (child processes inherit them) and restores them on exit.
    """

    def __init__(self, latency: float = 0.03, jitter: float = 0.01, env: bool = True) -> None:
        self.latency, self.jitter, self.set_env = latency, jitter, env
        self.endpoint = ""
        self._process: subprocess.Popen[str] | None = None
        self._saved: dict[str, str | None] = {}

    def env(self) -> dict[str, str]:
        """What a client needs: the endpoint and (fake) credentials."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    def __enter__(self) -> LocalS3:
        need_packages()
        command = [sys.executable, "-m", "lading.testing", "--port", "0"]
        command += ["--latency", str(self.latency), "--jitter", str(self.jitter)]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        ready = select.poll()  # (not select.select: a process may hold fds past 1024)
        ready.register(self._process.stdout, select.POLLIN)
        started = ready.poll(_START_S * 1000)
        line = self._process.stdout.readline() if started else f"nothing in {_START_S:.0f} s"
        if not line.startswith("http://"):
            self._process.kill()
            raise RuntimeError(f"the local S3 server did not start (it said {line!r})")
        self.endpoint = line.strip()
        if self.set_env:
            self._saved = {k: os.environ.get(k) for k in self.env()}
            os.environ.update(self.env())
        return self

    def __exit__(self, *exc: object) -> None:
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if self._process is not None:
            self._process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(10)
            if self._process.poll() is None:
                self._process.kill()

    def _call(self, what: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.endpoint}/_lading/{what}", data=data)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, Any]:
        """Requests since the last :meth:`reset`: ``gets``, ``get_bytes``, ``max_in_flight``,
        ``gets_by_key``, ``get_bytes_by_key``, ``heads``, ``puts``, ``lists``, ``faults``."""
        found: dict[str, Any] = self._call("stats")
        return found

    def reset(self) -> None:
        """Zero the counters and drop the fault rules."""
        self._call("reset", {})

    def fault(self, match: str, times: int, kind: str = "error", **more: Any) -> None:
        """Make the next ``times`` GETs of objects whose name holds ``match`` fail (``error``,
        with ``status``), wait ``delay`` seconds first (``slow``), come back short, end in a
        connection reset (``reset``) or never be answered (``hang``). ``op="list"``,
        ``"head"``, ``"put"`` or ``"any"`` aims the rule at other requests (``match`` is then
        matched against the path and query); ``header="If-None-Match"``, at those carrying
        that header (a conditional PUT) only."""
        self._call("faults", {"match": match, "times": times, "kind": kind, **more})

    def make_bucket(self, name: str) -> None:
        """Create bucket ``name`` (through the proxy, so its copies stay right).

        Raises:
            ValueError: a name S3 refuses (3-63 lowercase letters, digits, dots, hyphens).
        """
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name):
            raise ValueError(
                f"bucket name {name!r}: S3 takes 3-63 lowercase letters, digits, dots and "
                "hyphens, starting and ending with a letter or digit (e.g. 'my-bucket')"
            )
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT", data=b"")
        with urllib.request.urlopen(request, timeout=30):
            pass


def main(argv: list[str] | None = None) -> None:
    """Run the server until killed; print the proxy's URL on the first line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0, help="proxy port (0: a free one)")
    parser.add_argument("--latency", type=float, default=0.03, help="seconds a request waits")
    parser.add_argument("--jitter", type=float, default=0.01, help="± seconds around it")
    args = parser.parse_args(argv)
    try:
        need_packages()
    except ImportError as e:
        sys.exit(f"python -m lading.testing: {e}")
    listener = _listening(args.port)  # held from here on: no other process can take it

    def ready(url: str) -> None:
        print(url, flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(listener, args.latency, args.jitter, ready))


def _listening(port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:``port`` (0: one the kernel picks as it binds)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1024)
    return listener


def _upstream(upstream: str, request: Any, query: bool = True) -> Any:
    """The URL of ``request``'s object at ``upstream``, its path as the client escaped it: the
    decoded path would turn a key's ``#`` into a fragment and its ``?`` into a query."""
    from yarl import URL

    path = request.raw_path if query else request.raw_path.split("?", 1)[0]
    return URL(f"{upstream}{path}", encoded=True)


if __name__ == "__main__":
    main()
