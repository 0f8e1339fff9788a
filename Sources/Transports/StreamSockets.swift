// Opening the byte streams H4 runs over: TCP (TCP_NODELAY set, see DESIGN.md on
// Rootcanal), unix sockets, serial ttys and ptys (raw termios, chosen baud rate).
// We connect and configure the descriptor ourselves (so errors carry advice) and
// hand it to a NIO channel (`ChannelTransport`) read by the host's event loop.

import HCI
import Logging
import NIOCore
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// errno as a sentence.
func errnoString(_ e: Int32) -> String { String(cString: strerror(e)) }

public enum StreamTransports {
    /// H4 over TCP. Sets TCP_NODELAY, and acknowledges a read that ends inside a packet
    /// at once, one that ends on a packet boundary within 1 ms (`BoundedAck`).
    public static func tcp(host: String, port: UInt16, on loop: (any EventLoop)? = nil, logger: Logger) throws -> ChannelTransport {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &res)
        guard rc == 0, let first = res else {
            throw TransportError.unavailable("cannot resolve \(host): \(String(cString: gai_strerror(rc)))")
        }
        defer { freeaddrinfo(res) }
        var lastErrno: Int32 = 0
        var ai: UnsafeMutablePointer<addrinfo>? = first
        while let a = ai {
            let fd = socket(a.pointee.ai_family, a.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), a.pointee.ai_protocol)
            if fd >= 0 {
                if connect(fd, a.pointee.ai_addr, a.pointee.ai_addrlen) == 0 {
                    var one: Int32 = 1
                    _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
                    return ChannelTransport(fd: fd, kind: .streamSocket, label: "tcp:\(host):\(port)", quickAck: true, on: loop, logger: logger)
                }
                lastErrno = errno
                Glibc.close(fd)
            } else {
                lastErrno = errno
            }
            ai = a.pointee.ai_next
        }
        let hint = lastErrno == ECONNREFUSED ? " (is the controller, e.g. Rootcanal, listening on that port?)" : ""
        throw TransportError.io(operation: "connect tcp:\(host):\(port)", errno: lastErrno, reason: errnoString(lastErrno) + hint)
    }

    /// H4 over a unix stream socket.
    public static func unix(path: String, on loop: (any EventLoop)? = nil, logger: Logger) throws -> ChannelTransport {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            let e = errno
            throw TransportError.io(operation: "socket(AF_UNIX)", errno: e, reason: errnoString(e))
        }
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
            Glibc.close(fd)
            throw TransportError.unavailable("unix socket path too long (\(bytes.count) bytes): \(path)")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { p in
            for (i, b) in bytes.enumerated() { p[i] = b }
        }
        let ok = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard ok == 0 else {
            let e = errno
            Glibc.close(fd)
            throw TransportError.io(operation: "connect unix:\(path)", errno: e, reason: errnoString(e))
        }
        return ChannelTransport(fd: fd, kind: .streamSocket, label: "unix:\(path)", on: loop, logger: logger)
    }

    /// H4 over a serial tty or a pty: raw mode, 8N1, the given baud rate (nil keeps it),
    /// optional RTS/CTS flow control.
    public static func serial(path: String, baud: Int?, rtscts: Bool = false, on loop: (any EventLoop)? = nil, logger: Logger) throws -> ChannelTransport {
        let fd = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else {
            let e = errno
            let hint = e == EACCES ? " (add yourself to the dialout group or run with access to \(path))" : ""
            throw TransportError.io(operation: "open \(path)", errno: e, reason: errnoString(e) + hint)
        }
        var t = termios()
        guard tcgetattr(fd, &t) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw TransportError.io(operation: "tcgetattr \(path)", errno: e, reason: errnoString(e) + " (not a tty?)")
        }
        cfmakeraw(&t)
        t.c_cflag |= tcflag_t(CLOCAL | CREAD)
        if rtscts { t.c_cflag |= tcflag_t(CRTSCTS) } else { t.c_cflag &= ~tcflag_t(CRTSCTS) }
        if let baud {
            guard let speed = speedConstant(baud) else {
                Glibc.close(fd)
                throw TransportError.unavailable("unsupported baud rate \(baud); use one of \(supportedBauds.map(String.init).joined(separator: ", "))")
            }
            cfsetispeed(&t, speed)
            cfsetospeed(&t, speed)
        }
        guard tcsetattr(fd, TCSANOW, &t) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw TransportError.io(operation: "tcsetattr \(path)", errno: e, reason: errnoString(e))
        }
        tcflush(fd, TCIOFLUSH)
        return ChannelTransport(fd: fd, kind: .terminal, label: "serial:\(path)", on: loop, logger: logger)
    }

    static let supportedBauds = [9600, 19200, 38400, 57600, 115_200, 230_400, 460_800, 921_600, 1_000_000, 1_500_000, 2_000_000, 3_000_000]

    static func speedConstant(_ baud: Int) -> speed_t? {
        switch baud {
        case 9600: return speed_t(B9600)
        case 19200: return speed_t(B19200)
        case 38400: return speed_t(B38400)
        case 57600: return speed_t(B57600)
        case 115_200: return speed_t(B115200)
        case 230_400: return speed_t(B230400)
        case 460_800: return speed_t(B460800)
        case 921_600: return speed_t(B921600)
        case 1_000_000: return speed_t(B1000000)
        case 1_500_000: return speed_t(B1500000)
        case 2_000_000: return speed_t(B2000000)
        case 3_000_000: return speed_t(B3000000)
        default: return nil
        }
    }
}

/// A TCP port a host connects to, H4 as on Rootcanal's HCI port: `btctl monitor
/// --listen` puts itself between a host (Bumble, a daemon) and the controller and
/// decodes what passes. Binds at once (port 0 picks a free port, see `port`); each
/// `accept` takes one host.
public final class H4Listener: Sendable {
    private let fd: Int32
    private let closed = Atomic<Bool>(false)
    public let host: String
    /// The port bound (the one picked when asked for 0).
    public let port: UInt16

    public init(host: String, port: UInt16) throws {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &res)
        guard rc == 0, let a = res else { throw TransportError.unavailable("cannot resolve \(host): \(String(cString: gai_strerror(rc)))") }
        defer { freeaddrinfo(res) }
        let fd = socket(a.pointee.ai_family, a.pointee.ai_socktype | Int32(SOCK_CLOEXEC.rawValue), a.pointee.ai_protocol)
        guard fd >= 0 else {
            let e = errno
            throw TransportError.io(operation: "socket", errno: e, reason: errnoString(e))
        }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        guard bind(fd, a.pointee.ai_addr, a.pointee.ai_addrlen) == 0, Glibc.listen(fd, 1) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw TransportError.io(operation: "listen tcp:\(host):\(port)", errno: e, reason: errnoString(e) + (e == EADDRINUSE ? " (another program has that port)" : ""))
        }
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        let bound: UInt16 = withUnsafePointer(to: &storage) { p in
            p.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt16(bigEndian: $0.pointee.sin_port) }  // sin6_port sits at the same offset
        }
        self.fd = fd
        self.host = host
        self.port = bound
    }

    /// Waits (on its own thread, not the event loop) for a host to connect; throws
    /// once `close()` was called.
    public func accept(on loop: (any EventLoop)? = nil, logger: Logger) async throws -> ChannelTransport {
        let fd = self.fd, label = "tcp:\(host):\(port)"
        let client: Int32 = try await withCheckedThrowingContinuation { c in
            Thread.detachNewThread {
                while true {
                    let s = Glibc.accept(fd, nil, nil)
                    if s >= 0 {
                        _ = fcntl(s, F_SETFD, FD_CLOEXEC)
                        return c.resume(returning: s)
                    }
                    let e = errno
                    if e == EINTR { continue }
                    return c.resume(throwing: TransportError.io(operation: "accept \(label)", errno: e, reason: errnoString(e)))
                }
            }
        }
        var one: Int32 = 1
        _ = setsockopt(client, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return ChannelTransport(fd: client, kind: .streamSocket, label: "host on \(label)", quickAck: true, on: loop, logger: logger)
    }

    /// Stops listening; a waiting `accept` throws. Idempotent: the descriptor is
    /// closed once (a second close could hit a descriptor reused meanwhile).
    public func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        _ = shutdown(fd, Int32(SHUT_RDWR))
        Glibc.close(fd)
    }
}

