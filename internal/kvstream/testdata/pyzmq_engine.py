"""An engine's KV-event side on libzmq (pyzmq), for kvstream's interop tests.

publish: a PUB sending [topic, seq (8 bytes BE), payload] and a replay ROUTER
answering ["", start_seq] with ["", seq, payload] per buffered batch with
seq >= start_seq, then ["", ff*8, ""], as vLLM's ZmqEventPublisher does. The
PUB binds or connects as asked. Commands on stdin, one per line:
  pub TOPIC PAYLOAD    publish the next seq; prints the seq
  hide TOPIC PAYLOAD   stamp and buffer the next seq without sending it
  quit
subscribe: a SUB (connecting or binding) that prints each message as
"TOPIC SEQ PAYLOAD" until one with payload "last" arrived.
request: a DEALER asking a replay ROUTER for seq >= START; prints each
answer as "SEQ PAYLOAD", then "end".
"""

import argparse
import collections
import sys
import threading

import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


def publish(args, ctx):
    pub = ctx.socket(zmq.PUB)
    pub.set_hwm(100000)
    if args.bind:
        pub.bind(args.endpoint)
    else:
        pub.connect(args.endpoint)
    replay = ctx.socket(zmq.ROUTER)
    replay.bind(args.replay)
    buf = collections.deque(maxlen=args.buffer)
    lock = threading.Lock()
    stop = threading.Event()

    def serve_replay():
        poller = zmq.Poller()
        poller.register(replay, zmq.POLLIN)
        while not stop.is_set():
            if not poller.poll(50):
                continue
            frame = replay.recv_multipart()
            if len(frame) != 3:
                print("invalid replay request", file=sys.stderr, flush=True)
                continue
            client_id, _, start_seq_bytes = frame
            start_seq = int.from_bytes(start_seq_bytes, "big")
            with lock:
                batches = list(buf)
            for seq, payload in batches:
                if seq >= start_seq:
                    replay.send_multipart((client_id, b"", seq.to_bytes(8, "big"), payload))
            replay.send_multipart((client_id, b"", END_SEQ, b""))

    t = threading.Thread(target=serve_replay)
    t.start()
    print("ready", flush=True)
    seq = args.first
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        verb, topic, payload = parts[0], parts[1].encode(), parts[2].encode()
        with lock:
            buf.append((seq, payload))
        if verb == "pub":
            pub.send_multipart((topic, seq.to_bytes(8, "big"), payload))
        print(seq, flush=True)
        seq += 1
    stop.set()
    t.join()


def subscribe(args, ctx):
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, args.topic.encode())
    if args.bind:
        sub.bind(args.endpoint)
    else:
        sub.connect(args.endpoint)
    print("ready", flush=True)
    while True:
        topic, seq, payload = sub.recv_multipart()
        print(topic.decode(), int.from_bytes(seq, "big"), payload.decode(), flush=True)
        if payload == b"last":
            return


def request(args, ctx):
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(args.endpoint)
    print("ready", flush=True)
    dealer.send_multipart((b"", args.start.to_bytes(8, "big")))
    while True:
        _, seq, payload = dealer.recv_multipart()
        if seq == END_SEQ:
            print("end", flush=True)
            return
        print(int.from_bytes(seq, "big"), payload.decode(), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["publish", "subscribe", "request"])
    p.add_argument("endpoint")
    p.add_argument("--bind", action="store_true")
    p.add_argument("--replay", default="")
    p.add_argument("--buffer", type=int, default=10000)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--topic", default="")
    p.add_argument("--start", type=int, default=0)
    args = p.parse_args()
    ctx = zmq.Context()
    try:
        {"publish": publish, "subscribe": subscribe, "request": request}[args.mode](args, ctx)
    finally:
        ctx.destroy(linger=0)


if __name__ == "__main__":
    main()
