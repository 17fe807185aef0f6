"""``lading.testing``: the local S3 a user tries remote stores with, from Python and as
``python -m lading.testing`` (the command the docs give)."""

from __future__ import annotations

import json
import select
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

import lading
from lading.testing import LocalS3


@pytest.mark.slow  # a server started: ~3 s
def test_the_local_s3_binds_ports_it_holds_not_ones_it_found_free() -> None:
    """The server picked "free" ports (bind, close) and bound them later: a CI run lost one to
    another process in between ("address already in use", the server never started). A port
    found free that is taken by the time it is bound stands in for that race here."""
    pytest.importorskip("moto.server", reason="the local S3 needs moto: pip install 'moto[server]'")
    pytest.importorskip("aiohttp", reason="the local S3's proxy needs aiohttp")
    script = (
        "import socket, lading.testing.localserver as m\n"
        "taken = socket.socket(); taken.bind(('127.0.0.1', 0)); taken.listen()\n"
        "m.free_port = lambda *a: taken.getsockname()[1]\n"
        "m.main(['--port', '0', '--latency', '0'])\n"
    )
    server = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        ready = select.poll()  # (not select.select: this process may hold fds past 1024)
        ready.register(server.stdout, select.POLLIN)
        said = ready.poll(60_000)  # it hung for ever before
        url = server.stdout.readline().strip() if said else "nothing in 60 s"
        assert url.startswith("http://127.0.0.1:"), f"the server did not start: {url!r}"
        request = urllib.request.Request(f"{url}/demo", method="PUT", data=b"")
        with urllib.request.urlopen(request, timeout=30):
            pass
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.parametrize("module", ["lading.testing", "lading.testing.localserver"])
def test_python_m_lading_testing_serves_s3_on_the_printed_url(module: str) -> None:
    """Run as ``-m`` (either name): the proxy forwards requests (run as its own module, a
    helper defined below ``main()``'s call did not exist yet: every request answered 500)."""
    pytest.importorskip("moto.server", reason="the local S3 needs moto: pip install 'moto[server]'")
    pytest.importorskip("aiohttp", reason="the local S3's proxy needs aiohttp")
    command = [sys.executable, "-m", module, "--port", "0", "--latency", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") or url.startswith("http://localhost:"), url
        request = urllib.request.Request(f"{url}/demo", method="PUT", data=b"")
        with urllib.request.urlopen(request, timeout=30):
            pass
        with urllib.request.urlopen(f"{url}/_lading/stats", timeout=30) as response:
            stats = json.loads(response.read())
        assert stats["gets"] == 0 and stats["puts"] >= 1  # the bucket's PUT went through it
    finally:
        server.terminate()
        server.wait(10)


def test_local_s3_serves_a_remote_store(tmp_path: object, s3: LocalS3) -> None:
    from pathlib import Path

    root = Path(str(tmp_path))
    (root / "docs.tsv").write_text("".join(f"d{i}\tdocument {i}\n" for i in range(20)))
    s3.make_bucket("try-it")
    store = lading.build_store(root / "docs.tsv", "s3://try-it/docs", cache=root / "cache")
    assert store["d7"] == "document 7"
    assert s3.stats()["gets"] >= 1  # read through the local S3, not a local folder


def test_a_bucket_name_s3_refuses_is_named_with_the_rule(s3: LocalS3) -> None:
    """``make_bucket("b")`` was moto's bare "HTTP Error 400: Bad Request"."""
    for name in ("b", "Has-Upper", "-dash-first", "x" * 64):
        with pytest.raises(ValueError, match=r"S3 takes 3-63 lowercase letters"):
            s3.make_bucket(name)
    s3.make_bucket("a.b-3")


@pytest.mark.parametrize("key", ["ds/a#b.bin", "ds/q?x.bin", "ds/p%20.bin", "ds/sp ace.bin"])
def test_local_s3_serves_keys_that_must_be_escaped_in_a_url(s3: LocalS3, key: str) -> None:
    """A key holding ``#``, ``?`` or ``%`` was put and listed but every GET answered 404: the
    proxy forwarded the decoded path, so ``#`` began a fragment and ``?`` a query upstream.
    (A test of a loader over such keys then blamed the loader.)"""
    from lading.remote.clients import open_client

    s3.make_bucket("escaped-keys")
    client = open_client("s3://escaped-keys")
    client.put(key, b"hello " + key.encode())
    assert key in client.list("ds/")
    assert client.get(key) == b"hello " + key.encode()


def test_the_local_s3_leaves_no_folder_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server keeps copies of the objects in a temporary folder; it is ended by SIGTERM,
    which killed it before the folder was removed: every test session left lading-s3-* folders
    in the system's temp (257 on this machine in a day)."""
    pytest.importorskip("moto.server", reason="the local S3 needs moto: pip install 'moto[server]'")
    pytest.importorskip("aiohttp", reason="the local S3's proxy needs aiohttp")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the server's child makes its folder here
    with LocalS3(latency=0) as s3:
        s3.make_bucket("kept")
        assert len(list(tmp_path.glob("lading-s3-*"))) == 1
    assert list(tmp_path.glob("lading-s3-*")) == []
