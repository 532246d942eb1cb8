"""AES-128-GCM encryption (NIST SP 800-38D) in pure Python, for RFC 8188/8291 records (see ec.py for why).

Only encryption: Clarify never decrypts a push message. Tests check it against `cryptography`.
"""
from __future__ import annotations


def _sbox() -> bytes:
    box = [0] * 256
    p = q = 1
    while True:  # p runs over GF(2^8)* by 3, q over its inverses by 3^-1 (FIPS 197 §5.1.1)
        p = p ^ ((p << 1) & 0xFF) ^ (0x1B if p & 0x80 else 0)
        q ^= q << 1
        q ^= q << 2
        q ^= q << 4
        q &= 0xFF
        if q & 0x80:
            q ^= 0x09
        x = q ^ (q << 1 | q >> 7) ^ (q << 2 | q >> 6) ^ (q << 3 | q >> 5) ^ (q << 4 | q >> 4)
        box[p] = (x ^ 0x63) & 0xFF
        if p == 1:
            break
    box[0] = 0x63
    return bytes(box)


SBOX = _sbox()


def _xtime(b: int) -> int:
    return ((b << 1) ^ 0x1B) & 0xFF if b & 0x80 else b << 1


def expand_key(key: bytes) -> list[bytes]:
    """The eleven round keys of AES-128."""
    if len(key) != 16:
        raise ValueError("AES-128 takes a 16-byte key")
    words = [key[i:i + 4] for i in range(0, 16, 4)]
    rcon = 1
    for i in range(4, 44):
        t = words[i - 1]
        if i % 4 == 0:
            t = bytes((SBOX[t[1]] ^ rcon, SBOX[t[2]], SBOX[t[3]], SBOX[t[0]]))
            rcon = _xtime(rcon)
        words.append(bytes(a ^ b for a, b in zip(words[i - 4], t, strict=True)))
    return [b"".join(words[r * 4:r * 4 + 4]) for r in range(11)]


def encrypt_block(round_keys: list[bytes], block: bytes) -> bytes:
    s = [a ^ b for a, b in zip(block, round_keys[0], strict=True)]
    for rnd in range(1, 11):
        s = [SBOX[b] for b in s]
        s = [s[(i + 4 * (i % 4)) % 16] for i in range(16)]  # ShiftRows (column-major state)
        if rnd != 10:
            mixed = []
            for c in range(4):
                a0, a1, a2, a3 = s[4 * c:4 * c + 4]
                total = a0 ^ a1 ^ a2 ^ a3
                mixed += [a0 ^ total ^ _xtime(a0 ^ a1), a1 ^ total ^ _xtime(a1 ^ a2),
                          a2 ^ total ^ _xtime(a2 ^ a3), a3 ^ total ^ _xtime(a3 ^ a0)]
            s = mixed
        s = [a ^ b for a, b in zip(s, round_keys[rnd], strict=True)]
    return bytes(s)


R = 0xE1 << 120


def _gf_mult(x: int, y: int) -> int:
    z, v = 0, y
    for i in range(127, -1, -1):
        if (x >> i) & 1:
            z ^= v
        v = (v >> 1) ^ R if v & 1 else v >> 1
    return z


def _ghash(h: int, data: bytes) -> int:
    y = 0
    for i in range(0, len(data), 16):
        y = _gf_mult(y ^ int.from_bytes(data[i:i + 16].ljust(16, b"\x00"), "big"), h)
    return y


def encrypt(key: bytes, nonce: bytes, plaintext: bytes) -> bytes:
    """AES-128-GCM with a 12-byte nonce and no associated data: ciphertext || 16-byte tag."""
    if len(nonce) != 12:
        raise ValueError("the nonce is 12 bytes")
    keys = expand_key(key)
    h = int.from_bytes(encrypt_block(keys, bytes(16)), "big")
    out = bytearray()
    for counter, start in enumerate(range(0, len(plaintext), 16), start=2):
        stream = encrypt_block(keys, nonce + counter.to_bytes(4, "big"))
        out += bytes(a ^ b for a, b in zip(plaintext[start:start + 16], stream, strict=False))
    ciphertext = bytes(out)
    lengths = (0).to_bytes(8, "big") + (8 * len(ciphertext)).to_bytes(8, "big")
    s = _ghash(h, ciphertext.ljust(-(-len(ciphertext) // 16) * 16, b"\x00") + lengths)
    tag = int.from_bytes(encrypt_block(keys, nonce + (1).to_bytes(4, "big")), "big") ^ s
    return ciphertext + tag.to_bytes(16, "big")
