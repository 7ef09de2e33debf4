"""Security with real clients: TLS, mTLS and SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) on
one Skiff broker with four listeners, certificates and a JWT key made here with ``openssl``.

- PLAINTEXT: where the test creates the SCRAM users (confluent-kafka's AdminClient);
- SASL_SSL: every mechanism; confluent-kafka, kafka-python, aiokafka and kcat log in;
- SSL: a client certificate is required; ``CN=alice,O=Acme`` maps to ``User:alice``;
- SASL_PLAINTEXT: PLAIN and SCRAM without TLS.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from confluent_util import consumer, producer
from skiff_harness import SkiffBroker, free_port, require_tool
from skiff_fixtures import _LIVE, _require_binary

pytestmark = pytest.mark.timeout(120)

ISSUER = "https://issuer.skiff.test"
AUDIENCE = "skiff"
USERS = {"alice": "alice-secret", "bob": "bob-secret"}


def openssl(*args: str, input: bytes | None = None) -> bytes:
    tool = require_tool("openssl", package="openssl")
    p = subprocess.run([tool, *args], input=input, capture_output=True, timeout=30)
    assert p.returncode == 0, f"openssl {' '.join(args)}: {p.stderr.decode(errors='replace')}"
    return p.stdout


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Pki:
    """A CA, the broker's key and certificate, alice's client certificate, and an Ed25519
    JWT signing key with its JWKS."""

    def __init__(self, d: Path):
        self.dir = d
        self.ca_key, self.ca = d / "ca.key", d / "ca.pem"
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.ca_key), "-out",
                str(self.ca), "-days", "2", "-subj", "/CN=Skiff test CA")
        self.broker_pem = d / "broker.pem"
        self.broker_key, self.broker_cert = self._issue("broker", "/CN=localhost",
                                                        "subjectAltName=IP:127.0.0.1,DNS:localhost")
        self.broker_pem.write_bytes(self.broker_key.read_bytes() + self.broker_cert.read_bytes())
        self.alice_key, self.alice_cert = self._issue("alice", "/O=Acme/CN=alice",
                                                      "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth")
        self.jwt_key = d / "jwt.pem"
        openssl("genpkey", "-algorithm", "ed25519", "-out", str(self.jwt_key))
        public = openssl("pkey", "-in", str(self.jwt_key), "-pubout", "-outform", "DER")[-32:]
        self.jwks = d / "jwks.json"
        self.jwks.write_text(json.dumps(
            {"keys": [{"kty": "OKP", "crv": "Ed25519", "kid": "k1", "alg": "EdDSA", "use": "sig",
                       "x": b64url(public)}]}))

    def _issue(self, name: str, subject: str, ext: str) -> tuple[Path, Path]:
        key, csr, cert = self.dir / f"{name}.key", self.dir / f"{name}.csr", self.dir / f"{name}.crt"
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject)
        # Extensions make an X.509 v3 certificate, which TLS libraries require.
        extfile = self.dir / f"{name}.ext"
        extfile.write_text(ext + "\n")
        openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key),
                "-CAcreateserial", "-out", str(cert), "-days", "2", "-extfile", str(extfile))
        return key, cert

    def token(self, sub: str, exp_in_s: int = 3600, issuer: str = ISSUER) -> str:
        now = int(time.time())
        header = b64url(json.dumps({"alg": "EdDSA", "typ": "JWT", "kid": "k1"}).encode())
        claims = b64url(json.dumps({"sub": sub, "iss": issuer, "aud": AUDIENCE, "iat": now,
                                    "exp": now + exp_in_s}).encode())
        signing_input = f"{header}.{claims}".encode()
        data = self.dir / f"jwt-{uuid.uuid4().hex}.bin"
        data.write_bytes(signing_input)
        signature = openssl("pkeyutl", "-sign", "-inkey", str(self.jwt_key), "-rawin", "-in", str(data))
        return f"{header}.{claims}.{b64url(signature)}"


class SecureBroker(SkiffBroker):
    """A broker with Kafka's ``listeners`` instead of ``--listen``; ``port`` is PLAINTEXT's."""

    def __init__(self, binary: Path, d: Path, pki: Pki):
        super().__init__(binary, data_dir=d / "data", log_dir=d / "logs", extra_args=[])
        self.ports = {"PLAINTEXT": self.port, "SASL_SSL": free_port(), "SSL": free_port(),
                      "SASL_PLAINTEXT": free_port()}
        self.config = d / "skiff.toml"
        listeners = ",".join(f"{name}://127.0.0.1:{port}" for name, port in self.ports.items())
        self.config.write_text(f"""
listeners = "{listeners}"
"admin.listen" = "127.0.0.1:{self.admin_port}"
"ssl.keystore.type" = "PEM"
"ssl.keystore.location" = "{pki.broker_pem}"
"ssl.truststore.location" = "{pki.ca}"
"listener.name.ssl.ssl.client.auth" = "required"
"ssl.principal.mapping.rules" = "RULE:^CN=([^,]+),O=Acme$/$1/L,DEFAULT"
"sasl.enabled.mechanisms" = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER"
"listener.name.sasl_plaintext.sasl.enabled.mechanisms" = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
"sasl.oauthbearer.jwks.endpoint.url" = "file://{pki.jwks}"
"sasl.oauthbearer.expected.issuer" = "{ISSUER}"
"sasl.oauthbearer.expected.audience" = "{AUDIENCE}"
"connection.failed.authentication.delay.ms" = 50
""")

    @property
    def argv(self) -> list[str]:
        return [str(self.binary), "broker", "--config", str(self.config), "--data-dir", str(self.data_dir)]

    def addr(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def running(broker: SecureBroker, users: dict[str, str]):
    """Starts ``broker``, creates SCRAM-SHA-512 and -256 credentials for ``users`` over its
    PLAINTEXT listener (Kafka changes a user once per request: one request per mechanism), yields
    it, and stops it."""
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    _LIVE.append(broker)
    try:
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for mechanism in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):
            upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), pw.encode())
                       for user, pw in users.items()]
            for future in admin.alter_user_scram_credentials(upserts).values():
                future.result(timeout=20)
        yield broker
    finally:
        broker.stop()
        _LIVE.remove(broker)


@pytest.fixture(scope="module")
def secure(pki, tmp_path_factory) -> SecureBroker:
    yield from running(SecureBroker(_require_binary(), tmp_path_factory.mktemp("secure"), pki), USERS)


def sasl_conf(pki: Pki, mechanism: str, user: str = "alice", password: str | None = None) -> dict:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanisms": mechanism,
            "sasl.username": user, "sasl.password": password if password is not None else USERS[user]}


def roundtrip_confluent(bootstrap: str, conf: dict, n: int = 20, group_protocol: str = "classic") -> None:
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    errors: list = []
    p = producer(bootstrap, error_cb=errors.append, **conf)
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode())
    assert p.flush(20) == 0, f"unflushed; errors: {errors}"
    c = consumer(bootstrap, **{"group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                               "group.protocol": group_protocol, **conf})
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(n))
    finally:
        c.close()


def client_principals(b: SkiffBroker) -> set[tuple[str, str | None]]:
    with urllib.request.urlopen(f"{b.admin_url}/clients", timeout=10) as r:
        views = json.load(r)
    return {(c["listener"], c.get("principal")) for v in views for c in v["connections"]}


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_confluent_sasl_ssl(secure, pki, mechanism):
    roundtrip_confluent(secure.addr("SASL_SSL"), sasl_conf(pki, mechanism, "bob"))


def test_confluent_scram_kip848_consumer(secure, pki):
    roundtrip_confluent(secure.addr("SASL_SSL"), sasl_conf(pki, "SCRAM-SHA-512"), group_protocol="consumer")


def test_confluent_sasl_plaintext(secure, pki):
    conf = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": "alice", "sasl.password": USERS["alice"]}
    roundtrip_confluent(secure.addr("SASL_PLAINTEXT"), conf)


def test_confluent_mtls_maps_the_certificate_to_its_principal(secure, pki):
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.alice_cert), "ssl.key.location": str(pki.alice_key)}
    p = producer(secure.addr("SSL"), **conf)
    p.produce(f"mtls-{uuid.uuid4().hex[:8]}", value=b"x")
    assert p.flush(20) == 0
    assert ("SSL", "User:alice") in client_principals(secure)
    roundtrip_confluent(secure.addr("SSL"), conf)


def test_confluent_without_a_client_certificate_is_refused(secure, pki):
    errors: list = []
    p = producer(secure.addr("SSL"), error_cb=errors.append, **{"security.protocol": "SSL",
                                                                 "ssl.ca.location": str(pki.ca)})
    p.produce("nocert", value=b"x")
    assert p.flush(5) == 1
    assert errors, "librdkafka reported no error"


def test_confluent_oauthbearer(secure, pki):
    def oauth_cb(_config):
        return pki.token("carol"), time.time() + 3600, "carol", {}

    conf = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": oauth_cb}
    p = producer(secure.addr("SASL_SSL"), **conf)
    p.produce(f"oauth-{uuid.uuid4().hex[:8]}", value=b"x")
    assert p.flush(20) == 0
    assert ("SASL_SSL", "User:carol") in client_principals(secure)


def test_confluent_oauthbearer_refuses_a_bad_token(secure, pki):
    def oauth_cb(_config):
        return pki.token("carol", issuer="https://someone.else"), time.time() + 3600, "carol", {}

    errors: list = []
    conf = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": oauth_cb, "error_cb": errors.append}
    p = producer(secure.addr("SASL_SSL"), **conf)
    p.produce("oauth-bad", value=b"x")
    assert p.flush(5) == 1
    assert any("uthenticat" in str(e) for e in errors), errors


def test_confluent_wrong_password_is_an_authentication_error(secure, pki):
    from confluent_kafka import KafkaError

    errors: list = []
    p = producer(secure.addr("SASL_SSL"), error_cb=errors.append,
                 **sasl_conf(pki, "SCRAM-SHA-512", "alice", "not-the-password"))
    p.produce("wrong-pw", value=b"x")
    assert p.flush(5) == 1
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert not any("not-the-password" in str(e) for e in errors)
    assert "not-the-password" not in secure.stderr_text()


def test_confluent_admin_describes_scram_users(secure):
    from confluent_kafka.admin import AdminClient, ScramMechanism

    admin = AdminClient({"bootstrap.servers": secure.bootstrap})
    described = admin.describe_user_scram_credentials(["alice", "bob"])
    for user in ("alice", "bob"):
        infos = described[user].result(timeout=20).scram_credential_infos
        assert sorted((i.mechanism, i.iterations) for i in infos) == sorted(
            [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)])


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_kafka_python_sasl_ssl(secure, pki, mechanism):
    from kafka import KafkaConsumer, KafkaProducer

    conf = dict(bootstrap_servers=secure.addr("SASL_SSL"), security_protocol="SASL_SSL",
                ssl_cafile=str(pki.ca), sasl_mechanism=mechanism, sasl_plain_username="alice",
                sasl_plain_password=USERS["alice"], request_timeout_ms=20000)
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    p = KafkaProducer(**conf)
    for i in range(10):
        p.send(topic, f"v{i}".encode()).get(timeout=20)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf)
    got = [m.value for m in c]
    c.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(10))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_aiokafka_sasl_ssl(secure, pki, mechanism):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    async def run() -> list[bytes]:
        conf = dict(bootstrap_servers=secure.addr("SASL_SSL"), security_protocol="SASL_SSL",
                    ssl_context=create_ssl_context(cafile=str(pki.ca)), sasl_mechanism=mechanism,
                    sasl_plain_username="bob", sasl_plain_password=USERS["bob"])
        topic = f"aio-{uuid.uuid4().hex[:8]}"
        p = AIOKafkaProducer(**conf)
        await p.start()
        try:
            for i in range(10):
                await p.send_and_wait(topic, f"v{i}".encode())
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
        await c.start()
        got: list[bytes] = []
        try:
            while len(got) < 10:
                batch = await asyncio.wait_for(c.getmany(timeout_ms=1000), 20)
                for records in batch.values():
                    got.extend(r.value for r in records)
        finally:
            await c.stop()
        return got

    assert sorted(asyncio.run(run())) == sorted(f"v{i}".encode() for i in range(10))


def test_kcat_sasl_ssl_scram(secure, pki):
    kcat = require_tool("kcat", package="kcat")
    topic = f"kcat-sec-{uuid.uuid4().hex[:8]}"
    common = [kcat, "-b", secure.addr("SASL_SSL"), "-X", "security.protocol=SASL_SSL", "-X",
              f"ssl.ca.location={pki.ca}", "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice",
              "-X", f"sasl.password={USERS['alice']}", "-X", "socket.timeout.ms=10000"]
    p = subprocess.run([*common, "-P", "-t", topic], input="a\nb\nc\n", capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    p = subprocess.run([*common, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["a", "b", "c"]


class AuthzBroker(SecureBroker):
    """The secure broker with the ACL authorizer on; ``admin`` is a super user."""

    def __init__(self, binary: Path, d: Path, pki: Pki):
        super().__init__(binary, d, pki)
        with open(self.config, "a") as f:
            f.write('authorizer = "standard"\n"super.users" = "User:admin;User:ANONYMOUS"\n')


@pytest.fixture(scope="module")
def authz(pki, tmp_path_factory) -> AuthzBroker:
    broker = AuthzBroker(_require_binary(), tmp_path_factory.mktemp("authz"), pki)
    yield from running(broker, {**USERS, "admin": "admin-pw"})


def test_confluent_acls_decide_what_alice_may_do(authz, pki):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       AdminClient, NewTopic, ResourcePatternType, ResourceType)

    admin = AdminClient({"bootstrap.servers": authz.addr("SASL_SSL"),
                         **sasl_conf(pki, "SCRAM-SHA-512", "admin", "admin-pw")})
    suffix = uuid.uuid4().hex[:8]
    allowed, denied, group = f"orders-{suffix}", f"secret-{suffix}", f"g-{suffix}"
    for future in admin.create_topics([NewTopic(allowed, 1), NewTopic(denied, 1)]).values():
        future.result(timeout=20)
    acls = [
        AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, "User:alice", "*",
                   AclOperation.WRITE, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, "User:alice", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ]
    for future in admin.create_acls(acls).values():
        future.result(timeout=20)
    found = admin.describe_acls(AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, "User:alice",
                                                 None, AclOperation.ANY, AclPermissionType.ANY)).result(timeout=20)
    assert sorted(str(b.operation) for b in found) == sorted(str(b.operation) for b in acls)

    # alice writes where an ACL says so, and nowhere else.
    log: list = []
    p = producer(authz.addr("SASL_SSL"), **sasl_conf(pki, "SCRAM-SHA-512", "alice"))
    p.produce(allowed, value=b"ok", on_delivery=lambda err, msg: log.append(err))
    p.produce(denied, value=b"no", on_delivery=lambda err, msg: log.append(err))
    p.flush(20)
    codes = sorted(str(e.code()) if e else "ok" for e in log)
    assert codes == sorted(["ok", str(KafkaError.TOPIC_AUTHORIZATION_FAILED)]), log

    # Reading in a group needs READ on the group too.
    errors: list = []
    c = consumer(authz.addr("SASL_SSL"), **{"group.id": group, "auto.offset.reset": "earliest",
                                           "error_cb": errors.append,
                                           **sasl_conf(pki, "SCRAM-SHA-512", "alice")})
    try:
        c.subscribe([allowed])
        deadline = time.monotonic() + 20
        seen_group_error = False
        while time.monotonic() < deadline and not seen_group_error:
            m = c.poll(0.5)
            if m is not None and m.error() is not None:
                seen_group_error = m.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
            seen_group_error = seen_group_error or any(
                e.code() == KafkaError.GROUP_AUTHORIZATION_FAILED for e in errors)
        assert seen_group_error, errors
    finally:
        c.close()

    deleted = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED,
                                                  "User:alice", None, AclOperation.ANY,
                                                  AclPermissionType.ANY)])
    for future in deleted.values():
        assert len(future.result(timeout=20)) == 2
