"""A private Sigstore instance for the tests, scripted after the documented APIs.

In place of the public-good services it runs, on one loopback port:

- an OIDC provider of its own (``GET /token?email=...&iss=...``: an ES256 JWT
  with audience ``sigstore``; tests only, standing in for a real login), and
  GitHub Actions' ID token endpoint (``GET /actions-token?audience=sigstore``
  with ``Authorization: Bearer runner-secret``: ``{"value": JWT}`` for a
  workflow identity);
- Fulcio's v2 REST API (``POST /api/v2/signingCert``, as
  https://github.com/sigstore/fulcio/blob/main/fulcio.proto documents it):
  it checks the token's signature and the proof of possession over the
  token's ``sub`` (or ``email``) claim, and answers with a leaf certificate
  (Sigstore's X.509 profile: empty subject, SAN email, code-signing EKU, the
  OIDC issuer in extensions 1.3.6.1.4.1.57264.1.1 and .1.8) and its chain,
  with an SCT from its own CT log key embedded (RFC 6962 section 3.3);
- Rekor's v1 API (``POST /api/v1/log/entries`` for ``hashedrekord`` 0.0.1,
  as https://github.com/sigstore/rekor/blob/main/openapi.yaml documents it):
  an RFC 6962 Merkle tree held in memory, each entry answered with its
  signed entry timestamp, inclusion proof and signed checkpoint (a signed
  note, as https://github.com/transparency-dev/formats/tree/main/log says).

Under the path prefix ``/expired`` (a Fulcio URL of ``http://HOST:PORT/expired``)
Fulcio issues certificates that expired ten minutes before the request:
what the tests use for "a certificate expired before its log entry's time".

It writes ``trusted_root.json`` (Sigstore's trusted-root format) and
``trust_config.json`` (sigstore-python's ``--trust-config``: the trusted root
and a signing config naming this instance) into the directory given, then
prints one JSON line: ``{"url": ..., "trusted_root": ..., "trust_config": ...}``.

Usage: python sigstore_instance.py DIR
"""

import base64
import datetime
import hashlib
import http.server
import json
import struct
import sys
import threading
import time
import urllib.parse

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed, decode_dss_signature, encode_dss_signature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

AUDIENCE = "sigstore"
ORIGIN = "rekor.toolhost-tests - 1"
SIGNER = "rekor.toolhost-tests"
SCT_OID = ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
ISSUER_V1_OID = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
ISSUER_V2_OID = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def b64url(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def unb64url(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def spki(key) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def rfc3339(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def der_utf8(s: str) -> bytes:
    raw = s.encode()
    assert len(raw) < 128
    return bytes([0x0C, len(raw)]) + raw


def der_octets(raw: bytes) -> bytes:
    n = len(raw)
    if n < 128:
        return bytes([0x04, n]) + raw
    length = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x04, 0x80 | len(length)]) + length + raw


def canonical(obj) -> bytes:
    # RFC 8785 for the objects used here (strings and integers only).
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class Instance:
    def __init__(self):
        now = datetime.datetime.now(datetime.timezone.utc)
        self.start = now - datetime.timedelta(days=1)
        self.oidc_key = ec.generate_private_key(ec.SECP256R1())
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ct_key = ec.generate_private_key(ec.SECP256R1())
        self.rekor_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "toolhost-tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, "toolhost-tests private fulcio"),
        ])
        ski = x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key())
        self.ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.start)
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )
            .add_extension(ski, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )
        self.ct_log_id = hashlib.sha256(spki(self.ct_key)).digest()
        self.rekor_log_id = hashlib.sha256(spki(self.rekor_key)).digest()
        self.leaves: list[bytes] = []
        self.lock = threading.Lock()

    # The OIDC provider.
    def token(self, email: str, issuer: str, sub: str | None) -> str:
        now = int(time.time())
        header = {"alg": "ES256", "typ": "JWT", "kid": "toolhost-tests"}
        claims = {
            "iss": issuer, "aud": AUDIENCE, "sub": sub or email, "iat": now, "nbf": now, "exp": now + 600,
        }
        if "://" not in email:
            claims.update(email=email, email_verified=True)
        signing_input = f"{b64url(canonical(header))}.{b64url(canonical(claims))}"
        der = self.oidc_key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return f"{signing_input}.{b64url(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def check_token(self, token: str) -> dict:
        parts = token.split(".")
        if len(parts) != 3:
            raise ValueError("the identity token is not a JWT")
        raw = unb64url(parts[2])
        sig = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        self.oidc_key.public_key().verify(sig, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256()))
        claims = json.loads(unb64url(parts[1]))
        if claims.get("aud") != AUDIENCE or claims.get("exp", 0) < time.time():
            raise ValueError("the identity token is expired or not for sigstore")
        return claims

    # Fulcio.
    def signing_cert(self, request: dict, bearer: str | None, expired: bool) -> dict:
        # The token comes in the body's credentials or as a bearer token; the
        # key as a public key with a proof of possession (a signature over
        # the token's subject) or as a CSR signed by it.
        token = (request.get("credentials") or {}).get("oidcIdentityToken") or bearer
        if not token:
            raise ValueError("no identity token")
        claims = self.check_token(token)
        if "certificateSigningRequest" in request:
            csr = x509.load_pem_x509_csr(base64.b64decode(request["certificateSigningRequest"]))
            if not csr.is_signature_valid:
                raise ValueError("the CSR's signature does not verify")
            public_key = csr.public_key()
        else:
            key_pem = request["publicKeyRequest"]["publicKey"]["content"].encode()
            public_key = serialization.load_pem_public_key(key_pem)
            proof = base64.b64decode(request["publicKeyRequest"]["proofOfPossession"])
            public_key.verify(proof, claims["sub"].encode(), ec.ECDSA(hashes.SHA256()))
        # An email identity, or (a CI workflow) the subject as a URI.
        san = x509.RFC822Name(claims["email"]) if "email" in claims else x509.UniformResourceIdentifier(claims["sub"])
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        if expired:
            not_before, not_after = now - datetime.timedelta(minutes=20), now - datetime.timedelta(minutes=10)
        else:
            not_before, not_after = now - datetime.timedelta(seconds=5), now + datetime.timedelta(minutes=10)
        serial = x509.random_serial_number()

        def build(extra):
            b = (
                x509.CertificateBuilder()
                .subject_name(x509.Name([]))
                .issuer_name(self.ca_cert.subject)
                .public_key(public_key)
                .serial_number(serial)
                .not_valid_before(not_before)
                .not_valid_after(not_after)
                .add_extension(
                    x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
                )
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
                .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
                .add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), critical=False
                )
                .add_extension(x509.SubjectAlternativeName([san]), critical=True)
                .add_extension(x509.UnrecognizedExtension(ISSUER_V1_OID, claims["iss"].encode()), critical=False)
                .add_extension(x509.UnrecognizedExtension(ISSUER_V2_OID, der_utf8(claims["iss"])), critical=False)
            )
            for ext in extra:
                b = b.add_extension(ext, critical=False)
            return b.sign(self.ca_key, hashes.SHA256())

        # The precertificate's TBS is the final one without the SCT list
        # (RFC 6962 3.2), so sign over a build without it, then embed.
        tbs = build([]).tbs_certificate_bytes
        timestamp = int(time.time() * 1000)
        issuer_key_hash = hashlib.sha256(spki(self.ca_key)).digest()
        signed = (
            struct.pack(">BBQH", 0, 0, timestamp, 1)
            + issuer_key_hash
            + len(tbs).to_bytes(3, "big")
            + tbs
            + struct.pack(">H", 0)
        )
        sct_sig = self.ct_key.sign(signed, ec.ECDSA(hashes.SHA256()))
        sct = (
            struct.pack(">B", 0)
            + self.ct_log_id
            + struct.pack(">QH", timestamp, 0)
            + struct.pack(">BBH", 4, 3, len(sct_sig))
            + sct_sig
        )
        sct_list = struct.pack(">H", len(sct) + 2) + struct.pack(">H", len(sct)) + sct
        leaf = build([x509.UnrecognizedExtension(SCT_OID, der_octets(sct_list))])
        pem = [c.public_bytes(serialization.Encoding.PEM).decode() for c in (leaf, self.ca_cert)]
        return {"signedCertificateEmbeddedSct": {"chain": {"certificates": pem}}}

    # Rekor.
    def sign_note(self, size: int, root: bytes) -> str:
        note = f"{ORIGIN}\n{size}\n{b64(root)}\n"
        sig = self.rekor_key.sign(note.encode(), ec.ECDSA(hashes.SHA256()))
        return f"{note}\n\u2014 {SIGNER} {b64(self.rekor_log_id[:4] + sig)}\n"

    def add_entry(self, proposed: dict) -> dict:
        if proposed.get("kind") != "hashedrekord" or proposed.get("apiVersion") != "0.0.1":
            raise ValueError("only hashedrekord 0.0.1 entries are accepted")
        spec = proposed["spec"]
        data_hash = spec["data"]["hash"]
        if data_hash["algorithm"] != "sha256":
            raise ValueError("only sha256")
        # Rekor checks the signature before it logs anything.
        key_pem = base64.b64decode(spec["signature"]["publicKey"]["content"])
        try:
            key = x509.load_pem_x509_certificate(key_pem).public_key()
        except ValueError:
            key = serialization.load_pem_public_key(key_pem)
        key.verify(
            base64.b64decode(spec["signature"]["content"]),
            bytes.fromhex(data_hash["value"]),
            ec.ECDSA(Prehashed(hashes.SHA256())),
        )
        body = canonical({
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {"algorithm": "sha256", "value": data_hash["value"]}},
                "signature": {
                    "content": spec["signature"]["content"],
                    "publicKey": {"content": spec["signature"]["publicKey"]["content"]},
                },
            },
        })
        with self.lock:
            index = len(self.leaves)
            self.leaves.append(hashlib.sha256(b"\x00" + body).digest())
            size = len(self.leaves)
            proof = inclusion_proof(self.leaves, index)
            root = tree_hash(self.leaves)
        integrated = int(time.time())
        set_sig = self.rekor_key.sign(
            canonical({"body": b64(body), "integratedTime": integrated, "logID": self.rekor_log_id.hex(), "logIndex": index}),
            ec.ECDSA(hashes.SHA256()),
        )
        uuid = hashlib.sha256(b"\x00" + body).hexdigest()
        return {
            uuid: {
                "body": b64(body),
                "integratedTime": integrated,
                "logID": self.rekor_log_id.hex(),
                "logIndex": index,
                "verification": {
                    "signedEntryTimestamp": b64(set_sig),
                    "inclusionProof": {
                        "checkpoint": self.sign_note(size, root),
                        "hashes": [h.hex() for h in proof],
                        "logIndex": index,
                        "rootHash": root.hex(),
                        "treeSize": size,
                    },
                },
            }
        }

    def trusted_root(self, url: str) -> dict:
        start = rfc3339(self.start)
        return {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [{
                "baseUrl": url,
                "hashAlgorithm": "SHA2_256",
                "publicKey": {"rawBytes": b64(spki(self.rekor_key)), "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                              "validFor": {"start": start}},
                "logId": {"keyId": b64(self.rekor_log_id)},
            }],
            "certificateAuthorities": [{
                "subject": {"organization": "toolhost-tests", "commonName": "toolhost-tests private fulcio"},
                "uri": url,
                "certChain": {"certificates": [{"rawBytes": b64(self.ca_cert.public_bytes(serialization.Encoding.DER))}]},
                "validFor": {"start": start},
            }],
            "ctlogs": [{
                "baseUrl": url,
                "hashAlgorithm": "SHA2_256",
                "publicKey": {"rawBytes": b64(spki(self.ct_key)), "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                              "validFor": {"start": start}},
                "logId": {"keyId": b64(self.ct_log_id)},
            }],
            "timestampAuthorities": [],
        }

    def signing_config(self, url: str) -> dict:
        start = {"start": rfc3339(self.start)}
        return {
            "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
            "caUrls": [{"url": url, "majorApiVersion": 1, "validFor": start, "operator": "toolhost-tests"}],
            "oidcUrls": [{"url": url, "majorApiVersion": 1, "validFor": start, "operator": "toolhost-tests"}],
            "rekorTlogUrls": [{"url": url, "majorApiVersion": 1, "validFor": start, "operator": "toolhost-tests"}],
            "tsaUrls": [],
            "rekorTlogConfig": {"selector": "ANY"},
            "tsaConfig": {"selector": "ANY"},
        }


def hash_children(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def tree_hash(leaves: list[bytes]) -> bytes:
    # RFC 6962 2.1: MTH over leaf hashes, split at the largest power of two below n.
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return hash_children(tree_hash(leaves[:k]), tree_hash(leaves[k:]))


def inclusion_proof(leaves: list[bytes], m: int) -> list[bytes]:
    # RFC 6962 2.1.1: PATH(m, D[n]), lowest level first.
    if len(leaves) == 1:
        return []
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    if m < k:
        return inclusion_proof(leaves[:k], m) + [tree_hash(leaves[k:])]
    return inclusion_proof(leaves[k:], m - k) + [tree_hash(leaves[:k])]


def serve(instance: Instance) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *_):
            pass

        def answer(self, status: int, body: dict):
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            url = urllib.parse.urlparse(self.path)
            q = dict(urllib.parse.parse_qsl(url.query))
            if url.path == "/actions-token":
                # GitHub Actions' ID token endpoint, as its docs describe it:
                # the runner's bearer token, the audience as a parameter,
                # {"value": JWT} back.
                if self.headers.get("Authorization") != "Bearer runner-secret":
                    return self.answer(401, {"message": "bad runner token"})
                if q.get("audience") != AUDIENCE:
                    return self.answer(400, {"message": "audience must be sigstore"})
                return self.answer(200, {"value": instance.token(
                    "https://github.com/org/repo/.github/workflows/release.yml@refs/heads/main",
                    "https://token.actions.githubusercontent.com", None)})
            if url.path != "/token":
                return self.answer(404, {"message": "not found"})
            token = instance.token(q.get("email", "alice@example.org"), q.get("iss", "https://accounts.example.org"),
                                   q.get("sub"))
            raw = token.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            if length > 1 << 20:
                return self.answer(413, {"message": "too large"})
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError:
                return self.answer(400, {"message": "not JSON"})
            path = self.path
            expired = path.startswith("/expired/")
            if expired:
                path = path[len("/expired"):]
            try:
                if path == "/api/v2/signingCert":
                    auth = self.headers.get("Authorization", "")
                    bearer = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
                    return self.answer(200, instance.signing_cert(body, bearer, expired))
                if path == "/api/v1/log/entries":
                    return self.answer(201, instance.add_entry(body))
            except Exception as e:  # noqa: BLE001: the answer says what failed
                return self.answer(400, {"code": 400, "message": f"{type(e).__name__}: {e}"})
            return self.answer(404, {"message": "not found"})

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    out = sys.argv[1]
    instance = Instance()
    server = serve(instance)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    root = instance.trusted_root(url)
    with open(f"{out}/trusted_root.json", "w") as f:
        json.dump(root, f, indent=2)
    with open(f"{out}/trust_config.json", "w") as f:
        json.dump({
            "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
            "trustedRoot": root,
            "signingConfig": instance.signing_config(url),
        }, f, indent=2)
    print(json.dumps({"url": url, "trusted_root": f"{out}/trusted_root.json",
                      "trust_config": f"{out}/trust_config.json"}), flush=True)
    # Serves until stdin closes (the test ends).
    sys.stdin.read()


if __name__ == "__main__":
    main()
