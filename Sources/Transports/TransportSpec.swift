// `--transport SPEC` as btctl and the examples take it (docs/btctl.md):
//   hci0          HCI user channel (exclusive)      hci0:raw   HCI raw channel (shared)
//   tcp:HOST:PORT H4 over TCP (Rootcanal)           unix:PATH  H4 over a unix socket
//   serial:PATH[@BAUD][,rtscts]  H4 over a UART or a pty

import HCI
import Logging

public enum TransportSpec: Sendable, Equatable, CustomStringConvertible {
    case hci(index: UInt16, channel: HCIChannel)
    case tcp(host: String, port: UInt16)
    case unix(path: String)
    case serial(path: String, baud: Int?, rtscts: Bool)

    public static let help =
        "hci<N> (user channel), hci<N>:raw (raw channel), tcp:HOST:PORT, unix:PATH, serial:PATH[@BAUD][,rtscts]"

    public init(parsing s: String) throws {
        func bad(_ why: String) -> TransportError { .unavailable("invalid transport '\(s)': \(why); expected \(Self.help)") }
        if s.hasPrefix("hci") {
            let rest = s.dropFirst(3)
            let parts = rest.split(separator: ":", omittingEmptySubsequences: false)
            guard let n = parts.first.flatMap({ UInt16($0) }), parts.count <= 2 else { throw bad("adapter index must be a number") }
            if parts.count == 2 {
                guard parts[1] == "raw" || parts[1] == "user" else { throw bad("channel must be 'raw' or 'user'") }
                self = .hci(index: n, channel: parts[1] == "raw" ? .raw : .user)
            } else {
                self = .hci(index: n, channel: .user)
            }
        } else if s.hasPrefix("tcp:") {
            let rest = s.dropFirst(4)
            guard let colon = rest.lastIndex(of: ":") else { throw bad("needs HOST:PORT") }
            let portText = rest[rest.index(after: colon)...]
            guard let number = Int(portText) else { throw bad("port '\(portText)' is not a number") }
            guard let port = UInt16(exactly: number), port > 0 else { throw bad("port \(number) is out of range 1...65535") }
            var host = String(rest[..<colon])
            if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
            guard !host.isEmpty else { throw bad("empty host") }
            self = .tcp(host: host, port: port)
        } else if s.hasPrefix("unix:") {
            let path = String(s.dropFirst(5))
            guard !path.isEmpty else { throw bad("empty path") }
            self = .unix(path: path)
        } else if s.hasPrefix("serial:") {
            var rest = Substring(s.dropFirst(7))
            var rtscts = false
            if rest.hasSuffix(",rtscts") {
                rtscts = true
                rest = rest.dropLast(7)
            }
            var baud: Int?
            if let at = rest.lastIndex(of: "@") {
                guard let b = Int(rest[rest.index(after: at)...]) else { throw bad("baud rate must be a number") }
                baud = b
                rest = rest[..<at]
            }
            guard !rest.isEmpty else { throw bad("empty path") }
            self = .serial(path: String(rest), baud: baud, rtscts: rtscts)
        } else {
            throw bad("unknown kind")
        }
    }

    public var description: String {
        switch self {
        case let .hci(i, ch): return "hci\(i)\(ch == .raw ? ":raw" : "")"
        case let .tcp(h, p): return h.contains(":") ? "tcp:[\(h)]:\(p)" : "tcp:\(h):\(p)"
        case let .unix(p): return "unix:\(p)"
        case let .serial(p, b, r): return "serial:\(p)\(b.map { "@\($0)" } ?? "")\(r ? ",rtscts" : "")"
        }
    }

    /// Opens the transport this spec names.
    public func open(logger: Logger) throws -> any HCITransport {
        switch self {
        case let .hci(i, ch): return try BlueZ.open(index: i, channel: ch, logger: logger)
        case let .tcp(h, p): return try StreamTransports.tcp(host: h, port: p, logger: logger)
        case let .unix(p): return try StreamTransports.unix(path: p, logger: logger)
        case let .serial(p, b, r): return try StreamTransports.serial(path: p, baud: b, rtscts: r, logger: logger)
        }
    }
}
