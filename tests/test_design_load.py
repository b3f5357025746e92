"""A design's Locust client lives in its own folder (``load.py``) and is found through the
registry (``loadgen.client``), against the design API's ``lab.design.load``; ``import
lab.design`` stays free of gevent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab.design.load import Http, LoadClient, LoadPart, Refused, split_address
from lab.design.registry import REGISTRY, Registration
from loadgen import client

ROOT = Path(__file__).resolve().parents[1]
WITH_CLIENTS = ["beanstalkd", "cassieq", "kestrel", "nats", "primer", "queuefka", "rabbitmq", "redis"]


def test_each_design_with_a_client_is_found_in_its_own_folder():
    for name in WITH_CLIENTS:
        factory = client.client_factory(name)
        assert factory.__module__ == f"{REGISTRY[name].package}.load"
        assert client.client_ports(name)
    assert client.client_ports("cassieq") == ("http", "admin")
    assert client.releases("queuefka") is False and client.releases("primer") is True
    assert client.reads_in_batches("kestrel") and not client.reads_in_batches("cassieq")
    assert all(isinstance(client.load_part(name), LoadPart) for name in WITH_CLIENTS)
    assert client.Refused is Refused  # the load generator's name is the design API's


def test_a_design_without_a_client_is_refused_naming_those_with_one():
    with pytest.raises(ValueError) as error:
        client.client_factory("ideal")
    assert str(error.value) == f"no load generator for 'ideal' (there is one for: {', '.join(WITH_CLIENTS)})"


def _design_with_load(tmp_path: Path, monkeypatch, name: str, load_py: str) -> None:
    """A plug-in design ``name`` (the ideal one under another name) whose declared load module
    is ``load_py``, registered by hand."""
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "driver.py").write_text(
        "from lab.backends.ideal.driver import IdealBackend\nfrom lab.design import Parts\n\n\n"
        f"class Backend(IdealBackend):\n    name = {name!r}\n    parts = Parts(load={name + '.load'!r})\n")
    (package / "load.py").write_text(load_py)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(REGISTRY, name, Registration(name, f"{name}.driver:Backend"))


@pytest.mark.parametrize("name, load_py", [
    ("undeclared_load", "PORTS = ('http',)\n\n\ndef make_client(*args):\n    pass\n"),  # the old attributes
    ("misdeclared_load", "LOAD = {'ports': ('http',)}\n"),  # a LOAD that is no LoadPart
])
def test_a_load_module_without_its_declaration_is_refused_naming_the_line_to_add(tmp_path, monkeypatch, name,
                                                                                  load_py):
    _design_with_load(tmp_path, monkeypatch, name, load_py)
    for ask in (client.client_factory, client.client_ports, client.releases, client.reads_in_batches):
        with pytest.raises(ValueError) as error:
            ask(name)
        assert str(error.value) == (f"{name}'s load module {name}.load declares no LOAD = LoadPart(...) "
                                    f"(lab.design.load)")


def test_a_declared_load_part_is_what_the_lab_reads(tmp_path, monkeypatch):
    _design_with_load(tmp_path, monkeypatch, "declared_load", (
        "from lab.design.load import LoadPart\n\n\ndef make_client(targets, options, reliable, user, batch=1):\n"
        "    pass\n\n\ndef check(options, reliable, batch):\n    raise ValueError('no such load')\n\n\n"
        "LOAD = LoadPart(ports=('wire', 'admin'), make_client=make_client, releases=False, batches=True, check=check)\n"))
    assert client.client_ports("declared_load") == ("wire", "admin")
    assert not client.releases("declared_load") and client.reads_in_batches("declared_load")
    assert client.client_factory("declared_load").__module__ == "declared_load.load"
    with pytest.raises(ValueError, match="no such load"):
        client.check_load("declared_load", {}, True, 2)


def test_a_load_part_names_its_ports_and_every_client_says_what_it_buffers():
    for ports in ((), "http", ("http", 1)):
        with pytest.raises(ValueError, match="non-empty tuple of port names"):
            LoadPart(ports=ports, make_client=lambda *args: None)

    class Plain(LoadClient):
        def put(self, queue, body): ...
        def get(self, queue): ...
        def ack(self, queue, token): ...
        def release(self, queue, token): ...
        def close(self): ...

    assert Plain().buffered("q") == 0  # a client that holds nothing need not say so

    class Partial(LoadClient):
        def put(self, queue, body): ...

    with pytest.raises(TypeError):  # a client missing a verb fails when it is made, not mid-load
        Partial()


def test_a_design_check_refuses_a_load_its_client_cannot_make():
    with pytest.raises(ValueError, match="needs reliable"):
        client.check_load("kestrel", {}, False, 4)
    client.check_load("cassieq", {}, False, 4)  # no check: nothing to refuse


def test_importing_the_design_api_loads_no_gevent():
    probe = ("import sys, lab.design, lab.design.load, loadgen.client; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('gevent', 'geventhttpclient', 'locust')))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    done = subprocess.run([sys.executable, "-c", "import sys, lab.design; print('lab.design.load' in sys.modules)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False"


def test_http_reads_a_status_as_the_lab_does(monkeypatch):
    class Reply:
        def __init__(self, status: int):
            self.status_code = status

        def read(self) -> bytes:
            return b"why"

    class Fake:
        def __init__(self, *args, **kwargs):
            self.status, self.closed = 200, False

        def request(self, method, path, body, headers):
            return Reply(self.status)

        def close(self):
            self.closed = True

    monkeypatch.setattr(Http, "_connect", lambda self: Fake())
    http = Http("127.0.0.1:1", 1.0)
    assert http.call("GET", "/") == (200, b"why")
    http.client.status = 404
    with pytest.raises(Refused, match="404"):
        http.call("GET", "/q")
    assert http.call("GET", "/q", ok_statuses=(404,)) == (404, b"why")
    http.client.status = 503
    with pytest.raises(RuntimeError, match="HTTP 503"):
        http.call("GET", "/q")
    assert split_address("::1:8080") == ("::1", 8080)
