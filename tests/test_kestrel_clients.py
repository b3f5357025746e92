"""Kestrel with memcache clients nobody here wrote: python-memcached (PyPI, module
``memcache``) and the npm package ``memcached``, each installed into this session's temp
folder, against a real `lab serve kestrel`: set/get, reliable reads (``/open``, ``/close``,
``/abort``) and the limits a client meets (flags are not kept; a multi-key get serves the
first key only)."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.kestrel_support import KestrelProcess


@pytest.fixture(scope="session")
def python_memcached(tmp_path_factory):
    """python-memcached, installed with pip into a temp folder and imported from there."""
    target = tmp_path_factory.mktemp("pypi")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--target", str(target), "python-memcached"], check=True, timeout=300)
    sys.path.insert(0, str(target))
    try:
        yield importlib.import_module("memcache")
    finally:
        sys.path.remove(str(target))
        sys.modules.pop("memcache", None)


@pytest.fixture(scope="session")
def node_memcached(tmp_path_factory) -> Path:
    """The npm package ``memcached`` in a temp folder (its node_modules); skipped without npm."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        print("skipping the npm client test: npm or node is not installed")
        pytest.skip("npm or node is not installed")
    prefix = tmp_path_factory.mktemp("npm")
    subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
                    "memcached"], check=True, timeout=300, capture_output=True)
    return prefix / "node_modules"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = KestrelProcess(tmp_path_factory.mktemp("kestrel") / "queues", "maxOpenTransactions = 2\n").start()
    yield proc
    proc.stop()


def test_python_memcached_sets_gets_and_reads_reliably(server, python_memcached):
    mc = python_memcached.Client([f"127.0.0.1:{server.port}"])  # one connection: open reads are its own
    try:
        assert mc.set("pyq", b"one") and mc.set("pyq", "two")
        assert mc.get("pyq/open") == b"one"
        assert mc.get("pyq/abort") is None  # END: "one" is back at the head
        assert mc.get("pyq/close/open") == b"one"  # nothing to close yet; open the head
        assert mc.get("pyq/close/open") == b"two"  # confirm "one"; a str comes back as bytes (flags not kept)
        assert mc.get("pyq/close") is None  # confirm "two"
        assert mc.get("pyq") is None
        assert mc.set("pyq_int", 7) and mc.get("pyq_int") == b"7"  # python-memcached's int flag is lost too
        assert mc.set("mk_a", b"a") and mc.set("mk_b", b"b")
        assert mc.get_multi(["mk_a", "mk_b"]) == {"mk_a": b"a"}  # a multi-key get serves the first key only
        [(_, stats)] = mc.get_stats()
        assert stats["version"] == "2.4.8" and stats["queue_pyq_total_items"] == "2"
    finally:
        mc.disconnect_all()


NODE_SCRIPT = textwrap.dedent("""
    const Memcached = require("memcached");
    const mc = new Memcached(process.argv[2], {poolSize: 1, retries: 0, timeout: 3000});  // one connection
    const call = (name, ...args) => new Promise((ok, fail) =>
        mc[name](...args, (err, value) => err ? fail(err) : ok(value === undefined ? null : value)));
    (async () => {
        const out = {};
        out.set = [await call("set", "jsq", "one", 0), await call("set", "jsq", "two", 0)];
        out.open = await call("get", "jsq/open");
        out.abort = await call("get", "jsq/abort");
        out.reopen = await call("get", "jsq/close/open");
        out.next = await call("get", "jsq/close/open");
        out.close = await call("get", "jsq/close");
        out.empty = await call("get", "jsq");
        await call("set", "jsq_json", {a: 1}, 0);
        out.json = await call("get", "jsq_json");
        out.version = (await call("version"))[0].version;
        console.log(JSON.stringify(out));
        mc.end();
    })().catch(err => { console.error(String(err)); process.exit(1); });
""")


def test_npm_memcached_sets_gets_and_reads_reliably(server, node_memcached, tmp_path: Path):
    script = tmp_path / "client.js"
    script.write_text(NODE_SCRIPT)
    done = subprocess.run(["node", str(script), f"127.0.0.1:{server.port}"], capture_output=True, text=True,
                          timeout=30, env={**os.environ, "NODE_PATH": str(node_memcached)})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out == {"set": [True, True], "open": "one", "abort": None, "reopen": "one", "next": "two",
                   "close": None, "empty": None,
                   "json": '{"a":1}',  # the JSON flag is not kept: the string comes back
                   "version": "2.4.8"}
