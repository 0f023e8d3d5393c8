#!/usr/bin/env python3
"""MQTT devices for the mqtt source's tests (tests/common/mosquitto.rs).

N publishers (threads, each its own paho-mqtt client `<prefix>-<p>` with a
persistent session) each publish M numbered QoS 1 messages, with at most
`--inflight` unacknowledged at a time, and wait for every PUBACK. A lost
connection is retried with backoff by paho's network loop; the messages not
yet acknowledged stay in paho's session and are sent again (DUP) after the
reconnect. At the end one JSON line on stdout:

  {"acked": n, "per_publisher": {"0": n0, ...}, "reconnects": r,
   "refused": [{"publisher": p, "seq": i, "code": 135, "reason": "..."}],
   "connect_errors": [...], "finished": true}

`acked` counts successful PUBACKs only; a PUBACK with reason >= 0x80 (MQTT 5)
goes to `refused`. Exits 1 if not every publish was answered within
`--deadline` seconds, 2 on bad arguments.
"""

import argparse
import json
import sys
import threading
import time
import urllib.parse

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties


def payload(kind, p, i):
    if kind == "json":
        return json.dumps({"publisher": p, "seq": i, "msg": f"reading {i}"}).encode()
    if kind == "text":
        return f"publisher {p} seq {i}".encode()
    if kind == "invalid-json":
        return f'{{"publisher": {p}, "seq": {i}, "msg": '.encode()
    name, _, n = kind.partition(":")
    if name == "bytes":
        # Numbered, then bytes that are not UTF-8 and hold no newline (the
        # subscriber writes one message a line).
        head = f"{p}:{i}:".encode()
        return head + bytes(0x80 + (k % 0x7F) for k in range(max(int(n) - len(head), 0)))
    if name == "oversize":
        head = json.dumps({"publisher": p, "seq": i, "pad": ""}).encode()
        pad = "x" * max(int(n) - len(head), 0)
        return json.dumps({"publisher": p, "seq": i, "pad": pad}).encode()
    raise SystemExit(f"unknown --payload {kind}")


class Publisher:
    def __init__(self, args, p, deadline):
        self.args, self.p, self.deadline = args, p, deadline
        self.lock = threading.Lock()
        self.window = threading.Semaphore(args.inflight)
        self.pending = {}  # mid -> seq
        self.early = {}  # mid -> reason code
        self.answered = 0
        self.acked = 0
        self.refused = []
        self.connects = 0
        self.connect_errors = []
        self.connected = threading.Event()
        self.done = threading.Event()
        v5 = args.version == "5"
        cid = f"{args.client_prefix}-{p}"
        if v5:
            c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=mqtt.MQTTv5)
        else:
            c = mqtt.Client(
                mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=mqtt.MQTTv311, clean_session=False
            )
        url = urllib.parse.urlparse(args.url)
        self.host, self.port = url.hostname, url.port or (8883 if url.scheme == "mqtts" else 1883)
        if url.scheme == "mqtts":
            c.tls_set(ca_certs=args.ca, certfile=args.cert, keyfile=args.key)
        if args.username is not None:
            c.username_pw_set(args.username, args.password)
        c.max_inflight_messages_set(args.inflight)
        # Unbounded: messages waiting for a reconnect are kept, not dropped.
        c.max_queued_messages_set(0)
        c.reconnect_delay_set(min_delay=1, max_delay=4)
        c.on_connect = self.on_connect
        c.on_connect_fail = self.on_connect_fail
        c.on_publish = self.on_publish
        c.on_disconnect = self.on_disconnect
        self.client = c
        self.v5 = v5

    def on_connect(self, client, userdata, flags, reason_code, properties):
        with self.lock:
            if reason_code.is_failure:
                self.connect_errors.append(str(reason_code))
                return
            self.connects += 1
        self.connected.set()

    def on_connect_fail(self, client, userdata):
        with self.lock:
            self.connect_errors.append("connection failed (TCP or TLS)")

    def on_disconnect(self, client, userdata, flags, reason_code, properties):
        # Under TLS 1.3 a refused client certificate ends the connection
        # after the handshake looked done: a drop before any CONNACK.
        with self.lock:
            if self.connects == 0:
                self.connect_errors.append(f"connection lost before CONNACK ({reason_code})")

    def on_publish(self, client, userdata, mid, reason_code, properties):
        with self.lock:
            seq = self.pending.pop(mid, None)
            if seq is None:
                # Answered before run() recorded the mid (paho calls this with
                # its own lock held, so run() cannot hold ours across publish).
                self.early[mid] = reason_code
                return
            self.answer(seq, reason_code)

    def answer(self, seq, reason_code):
        self.answered += 1
        if self.v5 and reason_code.is_failure:
            self.refused.append({"publisher": self.p, "seq": seq, "code": reason_code.value, "reason": str(reason_code)})
        else:
            self.acked += 1
        if self.answered == self.args.messages:
            self.done.set()
        self.window.release()

    def start(self):
        props = None
        if self.v5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 3600
        # connect_async: the first connection is retried like later ones
        # (a broker still starting, or a refused TLS client).
        if self.v5:
            self.client.connect_async(
                self.host, self.port, keepalive=self.args.keep_alive, clean_start=False, properties=props
            )
        else:
            self.client.connect_async(self.host, self.port, keepalive=self.args.keep_alive)
        self.client.loop_start()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        if not self.connected.wait(max(self.deadline - time.monotonic(), 0)):
            return
        for i in range(self.args.messages):
            if not self.window.acquire(timeout=max(self.deadline - time.monotonic(), 0)):
                return
            topic = self.args.topic.replace("{p}", str(self.p))
            info = self.client.publish(topic, payload(self.args.payload, self.p, i), qos=self.args.qos)
            with self.lock:
                early = self.early.pop(info.mid, None)
                if early is None:
                    self.pending[info.mid] = i
                else:
                    self.answer(i, early)

    def stop(self):
        self.client.disconnect()
        self.client.loop_stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--ca")
    ap.add_argument("--cert")
    ap.add_argument("--key")
    ap.add_argument("--version", choices=["5", "3.1.1"], default="5")
    ap.add_argument("--publishers", type=int, default=1)
    ap.add_argument("--messages", type=int, default=10)
    ap.add_argument("--topic", default="devices/{p}/telemetry")
    ap.add_argument("--qos", type=int, choices=[1], default=1)
    ap.add_argument("--payload", default="json")
    ap.add_argument("--username")
    ap.add_argument("--password")
    ap.add_argument("--inflight", type=int, default=10)
    ap.add_argument("--client-prefix", default="device")
    ap.add_argument("--keep-alive", type=int, default=10)
    ap.add_argument("--deadline", type=float, default=60)
    args = ap.parse_args()
    payload(args.payload, 0, 0)  # bad --payload fails before connecting

    deadline = time.monotonic() + args.deadline
    pubs = [Publisher(args, p, deadline) for p in range(args.publishers)]
    for pub in pubs:
        pub.start()
    finished = all(pub.done.wait(max(deadline - time.monotonic(), 0)) for pub in pubs)
    for pub in pubs:
        pub.stop()
    summary = {
        "acked": sum(p.acked for p in pubs),
        "per_publisher": {str(p.p): p.acked for p in pubs},
        "reconnects": sum(max(p.connects - 1, 0) for p in pubs),
        "refused": [r for p in pubs for r in p.refused],
        "connect_errors": [e for p in pubs for e in p.connect_errors],
        "finished": finished,
    }
    print(json.dumps(summary), flush=True)
    sys.exit(0 if finished else 1)


if __name__ == "__main__":
    main()
