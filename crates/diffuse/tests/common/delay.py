# Hold every packet of NFQUEUE queue Q for D seconds, then let it through: netem's delay for a
# kernel without sch_netem (tests/common/netfault.rs, `NetHost::delay`). Packets leave in
# the order they came (one delay for all), so a verdict for the newest one due accepts every
# earlier one (NFQNL_MSG_VERDICT_BATCH). Speaks nfnetlink_queue directly: Python's standard
# library only. Usage: python3 delay.py Q D
import heapq, select, socket, struct, sys, time

q, delay = int(sys.argv[1]), float(sys.argv[2])
NETLINK_NETFILTER, SOL_NETLINK, NETLINK_NO_ENOBUFS = 12, 270, 5
SUBSYS_QUEUE, MSG_PACKET, MSG_CONFIG, MSG_VERDICT_BATCH = 3, 0, 2, 3
CFG_CMD, CFG_PARAMS, CFG_QUEUE_MAXLEN, PACKET_HDR, VERDICT_HDR = 1, 2, 3, 1, 2
BIND, COPY_META, NF_ACCEPT = 1, 1, 1
NLMSG_ERROR, NLM_F_REQUEST, NLM_F_ACK = 2, 1, 4

s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
s.bind((0, 0))


def attr(kind, data):
    n = 4 + len(data)
    return struct.pack("=HH", n, kind) + data + b"\0" * (-n % 4)


def send(msg, attrs, flags=NLM_F_REQUEST):
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(q)) + b"".join(attrs)
    head = struct.pack("=IHHII", 16 + len(body), (SUBSYS_QUEUE << 8) | msg, flags, 0, 0)
    s.send(head + body)


ack = NLM_F_REQUEST | NLM_F_ACK
send(MSG_CONFIG, [attr(CFG_CMD, struct.pack("!BBH", BIND, 0, 0))], ack)
send(MSG_CONFIG, [attr(CFG_PARAMS, struct.pack("!IB", 0, COPY_META))], ack)
send(MSG_CONFIG, [attr(CFG_QUEUE_MAXLEN, struct.pack("!I", 1 << 14))], ack)
print("delaying queue", q, "by", delay, "s", flush=True)

held = []  # (due, packet id)
while True:
    wait = max(0.0, held[0][0] - time.monotonic()) if held else None
    if select.select([s], [], [], wait)[0]:
        data = s.recv(1 << 20)
        now = time.monotonic()
        off = 0
        while off + 16 <= len(data):
            n, kind = struct.unpack_from("=IH", data, off)
            if kind == NLMSG_ERROR:
                err = struct.unpack_from("=i", data, off + 16)[0]
                if err:
                    sys.exit(f"nfnetlink_queue refused a request: error {err}")
            elif kind == (SUBSYS_QUEUE << 8) | MSG_PACKET:
                a = off + 20
                while a + 4 <= off + n:
                    alen, akind = struct.unpack_from("=HH", data, a)
                    if akind & 0x7FFF == PACKET_HDR:
                        packet = struct.unpack_from("!I", data, a + 4)[0]
                        heapq.heappush(held, (now + delay, packet))
                    a += (alen + 3) & ~3
            off += max(16, (n + 3) & ~3)
    now = time.monotonic()
    due = None
    while held and held[0][0] <= now:
        due = heapq.heappop(held)[1]
    if due is not None:
        send(MSG_VERDICT_BATCH, [attr(VERDICT_HDR, struct.pack("!II", NF_ACCEPT, due))])
