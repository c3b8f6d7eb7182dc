"""Public keys as OpenSSH reads them from authorized_keys: what sshd would refuse.

An authorized_keys line is `<type> <base64 blob> [comment]`; the blob is a sequence of
SSH strings (uint32 length, bytes) whose first is the key type again. OpenSSH 10 (Debian
13's) refuses, key by key, as sshkey.c does (sshkey_read, sshkey_from_blob_internal):
- a blob that is not base64, is cut off, or has bytes left after the key
  (SSH_ERR_INVALID_FORMAT, SSH_ERR_UNEXPECTED_TRAILING_DATA);
- a blob whose type is not the line's label (SSH_ERR_KEY_TYPE_MISMATCH);
- an RSA modulus under 1024 bits (sshkey.h's SSH_RSA_MINIMUM_MODULUS_SIZE:
  SSH_ERR_KEY_LENGTH) or over 16384 bits (sshbuf.h's SSHBUF_MAX_BIGNUM);
- an Ed25519 key that is not 32 bytes (crypto_api.h's crypto_sign_ed25519_PUBLICKEYBYTES);
- an ECDSA key whose curve is not the label's (SSH_ERR_EC_CURVE_MISMATCH) or whose point is
  not an uncompressed point on that curve (OpenSSL's EC_POINT_oct2point), or has an x or y
  of at most half the order's bits (sshkey_ec_validate_public): a mistyped ECDSA key.
DSA keys are gone from OpenSSH 10 (release notes: "support for DSA keys has been removed").
"""

from __future__ import annotations

import base64
import binascii

# The ECDSA curves OpenSSH knows, and their uncompressed point's length (0x04, x, y).
ECDSA_POINT = {"nistp256": 65, "nistp384": 97, "nistp521": 133}
# Each curve's y^2 = x^3 - 3x + b (mod p) and the bits of its order (SEC 2, FIPS 186-4 D.1.2).
ECDSA_CURVE = {
    "nistp256": (2**256 - 2**224 + 2**192 + 2**96 - 1,
                 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B, 256),
    "nistp384": (2**384 - 2**128 - 2**96 + 2**32 - 1,
                 0xB3312FA7E23EE7E4988E056BE3F82D19181D9C6EFE8141120314088F5013875AC656398D8A2ED19D2A85C8EDD3EC2AEF,
                 384),
    "nistp521": (2**521 - 1,
                 int("0051953EB9618E1C9A1F929A21A0B68540EEA2DA725B99B315F3B8B489918EF109E156193951EC7E937B1652C0"
                     "BD3BB1BF073573DF883D2C34F1EF451FD46B503F00", 16), 521),
}
ED25519_KEY_BYTES = 32
RSA_MIN_BITS = 1024
RSA_MAX_BITS = 16384
SK_ED25519 = "sk-ssh-ed25519@openssh.com"
SK_ECDSA = "sk-ecdsa-sha2-nistp256@openssh.com"
KEY_TYPES = ("ssh-ed25519", "ssh-rsa", *(f"ecdsa-sha2-{curve}" for curve in ECDSA_POINT), SK_ED25519, SK_ECDSA)


class _Cut(Exception):
    """The blob ends inside a field."""


class _Blob:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def string(self) -> bytes:
        if self.at + 4 > len(self.data):
            raise _Cut
        size = int.from_bytes(self.data[self.at:self.at + 4], "big")
        start, self.at = self.at + 4, self.at + 4 + size
        if self.at > len(self.data):
            raise _Cut
        return self.data[start:self.at]

    @property
    def rest(self) -> int:
        return len(self.data) - self.at


def key_problem(line: str) -> str | None:
    """Why sshd would refuse this authorized_keys line's key (a phrase), or None."""
    fields = line.split()
    label = fields[0] if fields else ""
    if label not in KEY_TYPES:
        return f"{label!r} is not a key type OpenSSH 10 takes (ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256, ...)"
    if len(fields) < 2:
        return "the key itself (the base64 after the type) is missing"
    try:
        blob = _Blob(base64.b64decode(fields[1], validate=True))
    except (binascii.Error, ValueError):
        return "the key is not base64: cut off or mistyped"
    try:
        embedded = blob.string().decode("ascii", "replace")
        if embedded != label:
            return f"labelled {label} but the key inside is {embedded or 'of no type'}"
        problem = _body_problem(label, blob)
    except _Cut:
        return "the key is cut off"
    if problem is None and blob.rest:
        return f"{blob.rest} byte(s) after the key: a pasted key ran into something else"
    return problem


def _body_problem(label: str, blob: _Blob) -> str | None:
    if label == "ssh-rsa":
        blob.string()  # the public exponent
        modulus = blob.string().lstrip(b"\0")
        bits = int.from_bytes(modulus, "big").bit_length()
        if bits < RSA_MIN_BITS:
            return f"an RSA key of {bits} bits; OpenSSH refuses RSA keys under {RSA_MIN_BITS} bits"
        if bits > RSA_MAX_BITS:
            return f"an RSA key of {bits} bits; OpenSSH reads RSA keys of at most {RSA_MAX_BITS} bits"
        return None
    if label in ("ssh-ed25519", SK_ED25519):
        size = len(blob.string())
        if size != ED25519_KEY_BYTES:
            return f"an Ed25519 key of {size} bytes; Ed25519 keys are {ED25519_KEY_BYTES}"
    else:
        curve = blob.string().decode("ascii", "replace")
        want = label.removeprefix("sk-").split("-")[2].split("@")[0]
        if curve != want:
            return f"labelled for curve {want} but the key is on {curve or 'no curve'}"
        point = blob.string()
        if len(point) != ECDSA_POINT[curve] or not point.startswith(b"\x04"):
            return f"not a {curve} public point ({len(point)} bytes; an uncompressed one is {ECDSA_POINT[curve]})"
        if not _on_curve(curve, point):
            return f"not a point on {curve}: the key was mistyped"
    if label in (SK_ED25519, SK_ECDSA):
        blob.string()  # the security key's application, e.g. ssh:
    return None


def _on_curve(curve: str, point: bytes) -> bool:
    """Is this uncompressed point (0x04, x, y) on the curve, as OpenSSH takes it (x and y
    below p, each of more than half the order's bits: sshkey_ec_validate_public)?"""
    p, b, order_bits = ECDSA_CURVE[curve]
    size = (len(point) - 1) // 2
    x, y = int.from_bytes(point[1:1 + size], "big"), int.from_bytes(point[1 + size:], "big")
    if x >= p or y >= p or min(x.bit_length(), y.bit_length()) <= order_bits // 2:
        return False
    return (y * y - (x * x * x - 3 * x + b)) % p == 0
