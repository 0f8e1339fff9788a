// A plain TCP connection to 127.0.0.1, for tests and probes that play or watch a peer
// below the transports (Rootcanal's readiness check, raw-socket tests, the benchmark's
// floor probe).

#if canImport(Glibc)
import Glibc
#endif

/// A blocking TCP socket connected to 127.0.0.1:`port` (the caller closes it), or nil
/// when none could be made or nothing accepts there.
public func connectToLoopback(port: UInt16) -> Int32? {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return nil }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
    }
    guard connected else { close(fd); return nil }
    return fd
}
