"""Keys and TLS on a real ``medretrieve serve`` process: both clients (sync over the lean transport, async, and
both over HTTPS with httpx) with a key from the argument or ``$MEDRETRIEVE_API_KEY``, each refusal typed; HTTPS
with a certificate made here; CORS over the wire."""
from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl

import httpx
import pytest

pytest.importorskip("uvicorn")
from medretrieve.client import AsyncClient, Client, Forbidden, Unauthorized  # noqa: E402
from medretrieve.testing.server import ServerProcess  # noqa: E402

SEARCH_KEY = "search-only-key-0123456789abcdef"
ALL_KEY = "all-scopes-key-0123456789abcdef0"
QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
ORIGIN = "https://app.example.org"


@pytest.fixture(scope="module")
def key_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("keys") / "keys.txt"
    path.write_text(f"{SEARCH_KEY} search\n{ALL_KEY} search,answer,admin\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def keyed_server(medretrieve_collection, key_file):
    args = ["--api-key-file", str(key_file), "--deadline-ms", "60000", "--cors-origin", ORIGIN]
    with ServerProcess(medretrieve_collection.directory, args, api_key=ALL_KEY) as srv:
        yield srv


def test_the_sync_client_sends_its_key(keyed_server, monkeypatch):
    monkeypatch.delenv("MEDRETRIEVE_API_KEY", raising=False)
    with Client(keyed_server.url, api_key=ALL_KEY) as client:
        assert client.search(QUESTION, k=2).hits[0].document_id == "demo-002"
        assert client.answer(QUESTION, k=2).citations
        assert [e.kind for e in client.stream_answer(QUESTION, k=2)][-1] == "answer"
        assert client.collection()["name"] == keyed_server.collection.rstrip("/").rsplit("/", 1)[-1]
        assert "medretrieve_requests" in client.metrics()
    with Client(keyed_server.url, api_key=SEARCH_KEY) as client:
        assert client.search_batch([QUESTION], k=1)[0].hits
        with pytest.raises(Forbidden) as info:
            client.answer(QUESTION)
        assert info.value.type == "insufficient_scope" and "'answer' scope" in info.value.message
        with pytest.raises(Forbidden):
            client.reload()
    with Client(keyed_server.url) as client:
        assert client.health()["status"] == "ok" and client.ready()  # open without a key
        with pytest.raises(Unauthorized) as info:
            client.search(QUESTION)
        assert info.value.status == 401 and info.value.type == "unauthorized"
    with Client(keyed_server.url, api_key="not-the-key-0123456789abcdef") as client, pytest.raises(Unauthorized):
        client.collection()


def test_the_key_comes_from_the_environment(keyed_server, monkeypatch):
    monkeypatch.setenv("MEDRETRIEVE_API_KEY", SEARCH_KEY)
    with Client(keyed_server.url) as client:
        assert client.search(QUESTION, k=1).hits
    with Client(keyed_server.url, headers={"Authorization": "Bearer wrong-key-0123456789abcdef"}) as client:
        with pytest.raises(Unauthorized):  # a caller's own header wins over the environment
            client.search(QUESTION, k=1)
    with pytest.raises(ValueError, match="not both"):
        Client(keyed_server.url, api_key=SEARCH_KEY, headers={"authorization": "Bearer x"})
    with pytest.raises(ValueError, match="api_key must be"):
        Client(keyed_server.url, api_key="two words")
    with pytest.raises(ValueError, match="api_key must be"):
        Client(keyed_server.url, api_key="a-key\r\nX-Injected: 1")


def test_the_async_client_sends_its_key(keyed_server, monkeypatch):
    monkeypatch.delenv("MEDRETRIEVE_API_KEY", raising=False)

    async def go():
        async with AsyncClient(keyed_server.url, api_key=ALL_KEY) as client:
            assert (await client.search(QUESTION, k=2)).hits[0].document_id == "demo-002"
            assert [e.kind async for e in client.stream_answer(QUESTION, k=2)][-1] == "answer"
        async with AsyncClient(keyed_server.url, api_key=SEARCH_KEY) as client:
            with pytest.raises(Forbidden):
                await client.answer(QUESTION)
        async with AsyncClient(keyed_server.url) as client:
            with pytest.raises(Unauthorized):
                await client.search(QUESTION)

    asyncio.run(go())


def test_cors_over_the_wire(keyed_server):
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization,content-type"}
    with httpx.Client(base_url=keyed_server.url) as http:
        assert http.options("/v1/search", headers=preflight).headers["access-control-allow-origin"] == ORIGIN
        reply = http.post("/v1/search", json={"question": QUESTION, "k": 1},
                          headers={"Origin": ORIGIN, "Authorization": f"Bearer {SEARCH_KEY}"})
        assert reply.status_code == 200 and reply.headers["access-control-allow-origin"] == ORIGIN
        assert "server-timing" in reply.headers["access-control-expose-headers"].lower()
        elsewhere = http.post("/v1/search", json={"question": QUESTION, "k": 1},
                              headers={"Origin": "https://evil.example", "Authorization": f"Bearer {SEARCH_KEY}"})
        assert "access-control-allow-origin" not in elsewhere.headers


def _self_signed(directory):
    """A certificate for 127.0.0.1 signed by its own key (PEM files), and an SSL context that trusts it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file, ssl.create_default_context(cafile=str(cert_file))


def test_https_with_a_certificate_and_a_key(medretrieve_collection, key_file, tmp_path):
    pytest.importorskip("cryptography")
    cert, key, trust = _self_signed(tmp_path)
    args = ["--api-key-file", str(key_file), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key),
            "--deadline-ms", "60000"]
    with ServerProcess(medretrieve_collection.directory, args, api_key=SEARCH_KEY, verify=str(cert)) as srv:
        assert srv.url.startswith("https://127.0.0.1:")
        with Client(srv.url, api_key=SEARCH_KEY, transport=httpx.HTTPTransport(verify=trust)) as client:
            assert client.search(QUESTION, k=1).hits[0].document_id == "demo-002"
        with Client(srv.url, transport=httpx.HTTPTransport(verify=trust)) as client, pytest.raises(Unauthorized):
            client.search(QUESTION, k=1)

        async def go():
            transport = httpx.AsyncHTTPTransport(verify=trust)
            async with AsyncClient(srv.url, api_key=SEARCH_KEY, transport=transport) as client:
                return (await client.search(QUESTION, k=1)).hits

        assert asyncio.run(go())
        with httpx.Client(verify=True) as untrusting, pytest.raises(httpx.ConnectError):
            untrusting.get(f"{srv.url}/healthz")  # the system's CAs do not know this certificate
        plain = srv.url.replace("https://", "http://")
        with httpx.Client(timeout=10.0) as http, pytest.raises(httpx.HTTPError):
            http.get(f"{plain}/healthz")  # plain HTTP to the TLS port is not served


def test_the_framework_retrievers_send_a_key(keyed_server, monkeypatch):
    monkeypatch.delenv("MEDRETRIEVE_API_KEY", raising=False)
    langchain = pytest.importorskip("medretrieve.integrations.langchain")
    retriever = langchain.LangChainRetriever(source=keyed_server.url, api_key=SEARCH_KEY, k=2)
    try:
        assert retriever.invoke(QUESTION)[0].metadata["document_id"] == "demo-002"
        assert SEARCH_KEY not in repr(retriever)  # a SecretStr
    finally:
        retriever.close()
    llamaindex = pytest.importorskip("medretrieve.integrations.llamaindex")
    nodes = llamaindex.LlamaIndexRetriever(keyed_server.url, api_key=SEARCH_KEY, k=2)
    try:
        assert nodes.retrieve(QUESTION)[0].node.ref_doc_id == "demo-002"
    finally:
        nodes.close()
    haystack = pytest.importorskip("medretrieve.integrations.haystack")
    from haystack.utils import Secret

    component = haystack.HaystackRetriever(keyed_server.url, api_key=Secret.from_token(SEARCH_KEY), k=2)
    try:
        assert component.run(QUESTION)["documents"][0].meta["document_id"] == "demo-002"
        with pytest.raises(ValueError):  # a token is never written into a pipeline
            component.to_dict()
    finally:
        component.close()
    monkeypatch.setenv("MEDRETRIEVE_API_KEY", SEARCH_KEY)
    by_name = haystack.HaystackRetriever(keyed_server.url, api_key=Secret.from_env_var("MEDRETRIEVE_API_KEY"), k=2)
    try:
        data = by_name.to_dict()
        assert SEARCH_KEY not in str(data) and data["init_parameters"]["api_key"]["env_vars"] == ["MEDRETRIEVE_API_KEY"]
        again = haystack.HaystackRetriever.from_dict(data)
        assert again.run(QUESTION)["documents"] and again.close() is None
    finally:
        by_name.close()
    with pytest.raises(TypeError, match="Secret"):
        haystack.HaystackRetriever(keyed_server.url, api_key=SEARCH_KEY)
    monkeypatch.delenv("MEDRETRIEVE_API_KEY")
    from medretrieve.client import Unauthorized

    bare = llamaindex.LlamaIndexRetriever(keyed_server.url, k=1)
    try:
        with pytest.raises(Unauthorized):
            bare.retrieve(QUESTION)
    finally:
        bare.close()
    with pytest.raises(TypeError, match="api_key goes with a server URL"):
        llamaindex.LlamaIndexRetriever(keyed_server.collection, api_key=SEARCH_KEY)


def test_server_process_says_when_it_needs_a_key(medretrieve_collection, key_file):
    keyless = ServerProcess(medretrieve_collection.directory, ["--api-key-file", str(key_file)])
    try:
        with pytest.raises(RuntimeError, match="pass ServerProcess"):
            keyless.start()
        assert keyless.process is None  # stopped, not left running
    finally:
        keyless.close()
