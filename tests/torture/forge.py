"""Part 3b: forged and altered messages against HMAC-SHA256 envelopes (SPEC E21/E22), signed and
signed + encrypted (E23).

A base image is a queue an Outbox with a per-seed key wrote (MemFS): messages with varied topics,
payloads, idempotency keys, QoS, retain, TTL and orig_seq, every one signed; the second half (and
the requeued ones) also encrypted (AES-256-CTR, nonces from the seed's RNG). Each forged image
replaces the payload of many DATA records with a forgery and re-encodes the record with a VALID
CRC (tests/ddqfmt.py, written from docs/SPEC.md), so DDQ's own format check
passes and only the tag can tell. Forgery kinds:

  flip      one to three bits flipped anywhere in the envelope (header, orig_seq, tag, nonce,
            key, topic, payload or ciphertext)
  set       one byte set in the header, key, topic or payload
  header    a header field re-packed: flags (QoS, retain, orig_seq, SHA/HMAC/encrypted bits),
            key_len, topic_len, ttl_ms, enqueued_ms
  body      the payload replaced, truncated or extended; the topic or key replaced
  tag       the tag replaced by random bytes, zeros, or the tag of another message
  splice    the header and tag of one message, the body of another
  unsigned  the same fields re-encoded without a tag, or with a SHA-256 instead
  otherkey  the same fields signed with another key (an attacker's), encrypted too if the
            original was
  nonce     (encrypted) the nonce replaced by random bytes or another message's nonce
  strip     (encrypted) bit 5 cleared and the nonce cut out, the tag kept: the ciphertext
            passed off as a plaintext payload

An image is opened with ddq_outbox.Outbox(hmac_key=KEY) and drained with get() (each acked). A
message get() returns whose fields (topic, payload, key, QoS, retain, TTL, enqueued_ms, orig_seq)
are not exactly those of a message the key holder signed is counted as forged_accepted. A forgery
equal to its original bytes is not counted (it is not a forgery). Every untouched message must
still be delivered (else the run is a harness error: a check that refuses everything proves
nothing), and every 8th image is also opened WITHOUT a key as a control: there forgeries must be
accepted (control_accepted > 0), which shows the count can fail.
"""

import random
import struct

import memfs

import ddqfmt as F

PATH = "/q"
OPTS = {
    "segment_bytes": 65536,
    "max_segments": 16,
    "max_payload_bytes": 1024,
    "max_items": 512,
    "index_bytes": 0,
}
T0 = 1767225600000
KINDS = (
    "flip",
    "set",
    "header",
    "body",
    "tag",
    "splice",
    "unsigned",
    "otherkey",
    "nonce",
    "strip",
)


class _Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def _fields(m):
    return (
        m.topic,
        bytes(m.payload),
        bytes(m.key),
        m.qos,
        bool(m.retain),
        m.ttl_ms,
        m.enqueued_ms,
        m.orig_seq,
    )


def _rand(rng, n):
    return bytes(rng.getrandbits(8) for _ in range(n))


def build_base(ddq, ob_mod, rng, key, n_msgs):
    """(files {name: bytes}, signed {fields}, envelopes [bytes], pending seqs) of a queue an
    Outbox with key wrote."""
    memfs.MemFS.Locked = ddq.Locked
    fs = memfs.MemFS(dirs=(PATH,))
    clock = _Clock(T0)
    ob = ob_mod.Outbox(PATH, storage=fs, clock=clock, seed=1, hmac_key=key, **OPTS)
    for i in range(n_msgs):
        if i == n_msgs // 2:  # the second half encrypted (E23): nonces from the seed's RNG
            ob.close()
            ob = ob_mod.Outbox(
                PATH,
                storage=fs,
                clock=clock,
                seed=1,
                hmac_key=key,
                encrypt=True,
                nonce=lambda: _rand(rng, 12),
                **OPTS,
            )
        clock.t += rng.randrange(1, 5000)
        topic = "site%d/%s/%d" % (
            rng.randrange(4),
            rng.choice(["temp", "hum", "ev", "\u00e9t\u00e9"]),
            i,
        )
        payload = _rand(rng, rng.randrange(0, 48))
        ob.put(
            topic,
            payload,
            qos=rng.randrange(2),
            retain=rng.random() < 0.2,
            ttl_ms=rng.choice([0, 0, 10**9]),
            key=_rand(rng, rng.randrange(0, 12)),
        )
    # a few requeued dead letters: orig_seq present (the tag sits at offset 27)
    for _ in range(3):
        m = ob.get()
        ob.reject(m, "forge base")
    ob.requeue(purge=False)  # no compaction: the image stays one generation, no manifest
    ob.close()
    files, _dirs = fs.snapshot()
    out = {p[len(PATH) + 1 :]: files[p] for p in files if p.startswith(PATH + "/")}
    envs = []
    for name in sorted(out):
        if F.parse_seg_name(name) is None:
            continue
        recs, _end = F.decode_records(out[name])
        envs += [pl for (_o, t, _s, _a, pl) in recs if t == F.T_DATA]
    signed = set(_fields(ob_mod.decode_envelope(e, hmac_key=key)) for e in envs)
    pending = set(it.seq for it in _items(ob_mod, out) if it.state in ("available", "claimed"))
    return out, signed, envs, pending


def _items(ob_mod, files):
    full = {PATH + "/" + n: files[n] for n in files}
    ob = ob_mod.Outbox(PATH, storage=memfs.MemFS(full, (PATH,)), clock=_Clock(T0), **OPTS)
    try:
        return list(ob.queue.items())
    finally:
        ob.close()


def _layout(env):
    # (flags, tag offset, key offset): the nonce (flag bit 5) sits between the tag and the key
    flags = env[3]
    a = 19 + (8 if flags & 0x08 else 0)
    return flags, a, a + 32 + (12 if flags & 0x20 else 0)


def forge(rng, ob_mod, env, envs, key, other_key):
    """(kind, forged bytes) for one signed envelope env."""
    kind = rng.choice(KINDS)
    b = bytearray(env)
    flags, a, p = _layout(env)
    if kind in ("nonce", "strip") and not flags & 0x20:
        kind = "flip"
    kl, tl = env[4], struct.unpack_from("<H", env, 5)[0]
    if kind == "flip":
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(b) * 8)
            b[i >> 3] ^= 1 << (i & 7)
    elif kind == "set":
        regions = [(0, 19), (p, p + kl), (p + kl, p + kl + tl), (p + kl + tl, len(b))]
        lo, hi = rng.choice([r for r in regions if r[1] > r[0]])
        b[rng.randrange(lo, hi)] = rng.getrandbits(8)
    elif kind == "header":
        field = rng.randrange(5)
        if field == 0:
            b[3] ^= rng.choice([0x01, 0x02, 0x04, 0x08, 0x10, 0x14, 0x03, 0x20, 0x30])
        elif field == 1:
            b[4] = rng.randrange(0, kl + tl + 1)
        elif field == 2:
            struct.pack_into("<H", b, 5, rng.randrange(1, kl + tl + 1))
        elif field == 3:
            struct.pack_into("<I", b, 7, rng.getrandbits(32))
        else:
            struct.pack_into("<Q", b, 11, rng.getrandbits(44))
    elif kind == "body":
        how = rng.randrange(5)
        body = p + kl + tl
        if how == 0:
            b[body:] = _rand(rng, len(b) - body)
        elif how == 1 and len(b) > body:
            del b[rng.randrange(body, len(b)) :]
        elif how == 2:
            b += _rand(rng, rng.randrange(1, 9))
        elif how == 3 and tl:
            b[p + kl : p + kl + tl] = ("x" * tl).encode()
        else:
            b[p : p + kl] = _rand(rng, kl)
            b[p + kl + tl :] = b"evil" + bytes(b[p + kl + tl + 4 :])
    elif kind == "tag":
        how = rng.randrange(3)
        if how == 0:
            b[a:p] = _rand(rng, 32)
        elif how == 1:
            b[a:p] = bytes(32)
        else:
            o = rng.choice(envs)
            oa = _layout(o)[1]
            b[a:p] = o[oa : oa + 32]
    elif kind == "splice":
        o = rng.choice(envs)
        op = _layout(o)[2]
        okl, otl = o[4], struct.unpack_from("<H", o, 5)[0]
        b = b[0:p] + o[op:]
        b[4] = okl
        struct.pack_into("<H", b, 5, otl)
    elif kind == "nonce":
        o = rng.choice([e for e in envs if e[3] & 0x20])
        op = _layout(o)[2]
        b[p - 12 : p] = _rand(rng, 12) if rng.random() < 0.5 else o[op - 12 : op]
    elif kind == "strip":
        b[3] &= ~0x20
        del b[p - 12 : p]
    else:
        m = ob_mod.decode_envelope(env)  # the attacker's view: an encrypted payload as ciphertext
        kw = {
            "qos": m.qos,
            "retain": m.retain,
            "enqueued_ms": m.enqueued_ms,
            "ttl_ms": m.ttl_ms,
            "key": m.key,
            "orig_seq": m.orig_seq,
        }
        if kind == "unsigned":
            kw["sha256"] = rng.random() < 0.5
        else:
            kw["hmac_key"] = other_key
            if m.encrypted:
                kw["encrypt"], kw["nonce"] = True, _rand(rng, 12)
        if rng.random() < 0.5:  # and a change the forger wants delivered
            m.payload = b"forged " + bytes(m.payload)
        b = bytearray(ob_mod.encode_envelope(m.topic, m.payload, **kw))
    return kind, bytes(b)


def _open_drain(ob_mod, files, key):
    full = {PATH + "/" + n: files[n] for n in files}
    fs = memfs.MemFS(full, (PATH,))
    ob = ob_mod.Outbox(PATH, storage=fs, clock=_Clock(T0 + 10**7), seed=1, hmac_key=key, **OPTS)
    got = []
    try:
        for _ in range(4 * OPTS["max_items"]):
            m = ob.get()
            if m is None:
                break
            got.append(_fields(m))
            ob.ack(m)
        unauth = ob.counters["unauthenticated"] + ob.counters["corrupt"]
    finally:
        ob.close()
    return got, unauth


def run_seed(ddq, seed, n_forged, per_image=40, max_fail=5):
    import ddq_outbox as ob_mod

    rng = random.Random(seed)
    key, other = _rand(rng, 32), _rand(rng, 32)
    base, signed, envs, pending = build_base(ddq, ob_mod, rng, key, 64)
    res = {
        "seed": seed,
        "forged": 0,
        "accepted": 0,
        "images": 0,
        "by_kind": {},
        "control_images": 0,
        "control_accepted": 0,
        "legit_delivered": 0,
        "refused": 0,
        "unexpected": 0,
        "fail": [],
        "encrypted_forged": 0,
    }
    segs = sorted(n for n in base if F.parse_seg_name(n) is not None)
    while res["forged"] < n_forged:
        files = dict(base)
        forged_here, want = 0, 0
        for name in segs:
            data = bytes(base[name])
            recs, end = F.decode_records(data)
            out = []
            for off, t, s, arg, pl in recs:
                rec = data[off : off + 48 + len(pl)]
                if t == F.T_DATA and forged_here < per_image and rng.random() < 0.75:
                    kind, fb = forge(rng, ob_mod, pl, envs, key, other)
                    if fb != pl:
                        rec = F.encode_record(t, s, arg, fb)  # a VALID record CRC
                        forged_here += 1
                        res["encrypted_forged"] += bool(pl[3] & 0x20)
                        res["by_kind"][kind] = res["by_kind"].get(kind, 0) + 1
                    else:
                        want += s in pending
                elif t == F.T_DATA:
                    want += s in pending
                out.append(rec)
            files[name] = b"".join(out) + data[end:]
        res["images"] += 1
        res["forged"] += forged_here
        try:
            got, unauth = _open_drain(ob_mod, files, key)
        except Exception as e:
            res["unexpected"] += 1
            if len(res["fail"]) < max_fail:
                res["fail"].append(
                    {
                        "seed": seed,
                        "category": "unexpected",
                        "detail": "open/drain raised %s: %s" % (type(e).__name__, e),
                    }
                )
            continue
        res["refused"] += unauth
        bad = [g for g in got if g not in signed]
        res["accepted"] += len(bad)
        res["legit_delivered"] += len(got) - len(bad)
        if bad and len(res["fail"]) < max_fail:
            res["fail"].append(
                {
                    "seed": seed,
                    "category": "forged_accepted",
                    "detail": "get() returned a forged message: %r" % (bad[0],),
                }
            )
        # every untouched pending message is delivered, and nothing else that is legit
        if len(got) - len(bad) != want:
            res["unexpected"] += 1
            if len(res["fail"]) < max_fail:
                res["fail"].append(
                    {
                        "seed": seed,
                        "category": "unexpected",
                        "detail": "%d legit messages delivered, %d untouched"
                        % (len(got) - len(bad), want),
                    }
                )
        if res["images"] % 8 == 1:  # the control: no key, the same image
            res["control_images"] += 1
            cgot, _u = _open_drain(ob_mod, files, None)
            res["control_accepted"] += sum(1 for g in cgot if g not in signed)
    if res["control_images"] and not res["control_accepted"]:
        res["unexpected"] += 1
        res["fail"].append(
            {
                "seed": seed,
                "category": "unexpected",
                "detail": "control without a key accepted no forgery: the count cannot fail",
            }
        )
    return res
