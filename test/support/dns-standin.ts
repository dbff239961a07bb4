// A stand-in DNS server (Python, for a test's network namespace): A records of `names` (a Python
// dict literal of bytes → the address variable's name), NXDOMAIN otherwise, on UDP port 53. The
// network tests that stand in for a cluster's DNS splice it after their own servers.
export const dnsStandIn = (names: string) => `
names = ${names}
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("0.0.0.0", 53))
while True:
    q, a = u.recvfrom(512)
    i, labels = 12, []
    while q[i]: labels.append(q[i+1:i+1+q[i]]); i += 1 + q[i]
    name, qtype = b".".join(labels).lower(), struct.unpack("!H", q[i+1:i+3])[0]
    ip = names.get(name)
    head = q[:2] + struct.pack("!HHHHH", 0x8180 if ip else 0x8183, 1, 1 if ip and qtype == 1 else 0, 0, 0)
    ans = b"\\xc0\\x0c" + struct.pack("!HHIH", 1, 1, 30, 4) + socket.inet_aton(ip) if ip and qtype == 1 else b""
    u.sendto(head + q[12:i+5] + ans, a)
`;
