"""Fake secrets of every built-in kind, shaped as the real ones, as a pipeline would meet
them; and values of the engine's own that look random but must never be redacted.

``PLANTED[name] = (kind, text, secret)``: ``text`` is what a pipeline carries (a key
alone, or in its context: a connection string, ``password=...``), ``secret`` the part
that must not be found anywhere afterwards, ``kind`` the replacement's kind.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import uuid

_B64_KEY = base64.b64encode(hashlib.sha512(b"azure account key").digest()).decode()  # 88 characters
_PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u"
_GCP_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7bRqoV3g7xKpL2mNqW8sZcF4tY1uJ9eDhRvXaQ2zOwPn5yT0"
_AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzQ8vL3kP2t"
_SIG = "Zm9vYmFyJTJCYmF6cXV4JTJGMTIzNDU2Nzg5MA%3D"
_JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkphbmUifQ"
        ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")


def _pem(kind: str, body: str) -> str:
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {kind}-----", *lines, f"-----END {kind}-----"])


PLANTED: dict[str, tuple[str, str, str]] = {
    "openai key": ("api_key", "sk-test-51HfakeKEYabcdefghijklmnopqrstu", "sk-test-51HfakeKEYabcdefghijklmnopqrstu"),
    "bearer token": ("bearer", "Bearer tok_9f8e7d6c5b4a39281706zz", "tok_9f8e7d6c5b4a39281706zz"),
    "e-mail": ("email", "jane.doe@example.com", "jane.doe@example.com"),
    "aws key id": ("api_key", "AKIAQX3EXAMPLE7KEY12", "AKIAQX3EXAMPLE7KEY12"),
    "github token": ("api_key", "ghp_x7Yq2Lm9Pz4Kw8Rt3Vb6Nc1Hd5Jf0Gs2Aa9E", "ghp_x7Yq2Lm9Pz4Kw8Rt3Vb6Nc1Hd5Jf0Gs2Aa9E"),
    "slack token": ("api_key", "xoxb-2048-9271-zQ8fLr4Kp1Vw7Tn3", "xoxb-2048-9271-zQ8fLr4Kp1Vw7Tn3"),
    "google key": ("api_key", "AIzaSyD7f3KqL9mX2vR8pT4wN6bJ1cH5gZ0eYuA", "AIzaSyD7f3KqL9mX2vR8pT4wN6bJ1cH5gZ0eYuA"),
    "aws secret": ("aws_secret", f"aws_secret_access_key = {_AWS_SECRET}", _AWS_SECRET),
    "stripe secret key": ("stripe_key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    "stripe restricted key": ("stripe_key", "rk_live_9fK2mP7qR4sT6vW8xY1zA3bC", "rk_live_9fK2mP7qR4sT6vW8xY1zA3bC"),
    "jwt": ("jwt", _JWT, _JWT),
    "pem private key": ("private_key", _pem("RSA PRIVATE KEY", _PEM_BODY), _PEM_BODY[:64]),
    "azure connection string": (
        "azure_key", f"DefaultEndpointsProtocol=https;AccountName=acme;AccountKey={_B64_KEY};"
        "EndpointSuffix=core.windows.net", _B64_KEY),
    "url password": ("url_password", "postgres://admin:Sup3rS3cretPw9@db.internal:5432/app", "Sup3rS3cretPw9"),
    "gitlab token": ("gitlab_token", "glpat-Xq7vR2mK9pL4wT8nB3cZ", "glpat-Xq7vR2mK9pL4wT8nB3cZ"),
    "npm token": ("npm_token", "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    "sendgrid key": ("sendgrid_key", "SG.aBcDeFgHiJkLmNoPqRsTuV.wXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ012",
                     "wXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ012"),
    "twilio key": ("twilio_key", "SK0123456789abcdef0123456789abcdef", "SK0123456789abcdef0123456789abcdef"),
    "azure sas": ("azure_sas", f"https://acme.blob.core.windows.net/c/b.txt?sv=2022-11-02&sr=b&sp=r&sig={_SIG}", _SIG),
    "gcp service account": ("private_key", json.dumps({
        "type": "service_account", "project_id": "acme-prod", "private_key": _pem("PRIVATE KEY", _GCP_BODY) + "\n",
        "client_email": "svc@acme-prod.iam.gserviceaccount.com"}), _GCP_BODY[:64]),
    "password assignment": ("assignment", "password=hunter2-Correct", "hunter2-Correct"),
    "secret assignment": ("assignment", "client_secret: 'Qm9vLXNlY3JldC12YWx1ZQ'", "Qm9vLXNlY3JldC12YWx1ZQ"),
    "token assignment": ("assignment", "refresh_token=1//0gXyZAbC-dEfGhIjK", "1//0gXyZAbC-dEfGhIjK"),
}

ALL_PLANTED = "\n".join(text for _, text, _ in PLANTED.values())
"""Every planted text, one after the other."""

API_KEY, BEARER, EMAIL = PLANTED["openai key"][1], PLANTED["bearer token"][1], PLANTED["e-mail"][1]

_EMBEDDING = struct.pack("<64f", *(0.1 * i - 3.2 for i in range(64)))
HARMLESS: dict[str, str] = {
    "content hash": "sha256:" + hashlib.sha256(b"a document").hexdigest(),
    "bare hex digest": hashlib.sha256(b"another").hexdigest(),
    "sha-1 digest": hashlib.sha1(b"x").hexdigest(),
    "uuid": str(uuid.UUID(int=0x1234_5678_9ABC_DEF0_1234_5678_9ABC_DEF0)),
    "upper-case uuid": str(uuid.UUID(int=0xACDC_5678_9ABC_DEF0_1234_5678_9ABC_DEF0)).upper(),
    "trace id": "20261202T034157Z-4f3a9c/q1/0",
    "sample key": "s:4f3a9c2b7d1e6f80:answer#0:3",
    "otel trace id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "base64 embedding": base64.b64encode(_EMBEDDING).decode(),
    "base64url embedding": base64.urlsafe_b64encode(hashlib.sha512(b"e").digest() * 8).decode(),
    "usage": json.dumps({"usage": {"prompt_tokens": 512, "completion_tokens": 64, "total_tokens": 576},
                         "max_tokens": 256, "token_count": 4}),
    "url": "https://docs.example.com/a/b?page=2&token_count=4&user=bob",
    "base url": "http://127.0.0.1:8731/v1",
    "prose": "Reset your password: open Settings. The secret to success is practice. A token of thanks.",
    "tool schema": json.dumps({"name": "lookup", "parameters": {"properties": {"api_key": {"type": "string"},
                                                                          "token": {"type": "string"}}}}),
}
