// Encoders for the trace formats we write (btsnoop 1001/1002/2001, pcap 201/254)
// and a file sink. Encoders are pure; `TraceFileWriter` is the only file I/O here.

import HCI
import NIOCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Produces the bytes of a trace file: `header` once, then `record(_:)` per frame.
public struct TraceEncoder: Sendable {
    public enum Output: Sendable, Equatable, CustomStringConvertible {
        public var description: String {
            switch self {
            case let .btsnoop(d): return "btsnoop, datalink \(d)"
            case let .pcap(l): return "pcap, link type \(l)"
            case let .pcapng(l): return "pcapng, link type \(l)"
            }
        }

        case btsnoop(datalink: UInt32)
        case pcap(linkType: UInt32)
        /// One section, one interface of this link type, microsecond timestamps, Enhanced Packet Blocks.
        case pcapng(linkType: UInt32)

        /// By the file name: `.pcap` and `.pcapng` as named (H4 with the direction
        /// pseudo-header, which Wireshark reads), anything else btsnoop (H4).
        public init(forPath path: String) {
            let lower = path.lowercased()
            if lower.hasSuffix(".pcapng") {
                self = .pcapng(linkType: TraceFormat.linkTypeH4WithPHDR)
            } else if lower.hasSuffix(".pcap") {
                self = .pcap(linkType: TraceFormat.linkTypeH4WithPHDR)
            } else {
                self = .btsnoop(datalink: TraceFormat.btsnoopH4)
            }
        }
    }
    public var output: Output

    public init(_ output: Output = .btsnoop(datalink: TraceFormat.btsnoopH4)) { self.output = output }

    public var header: [UInt8] {
        var w = ByteWriter(capacity: 24)
        switch output {
        case let .btsnoop(datalink):
            w.write(contentsOf: Array("btsnoop\0".utf8))
            w.writeBE(UInt32(1))
            w.writeBE(datalink)
        case let .pcap(linkType):
            w.write(UInt32(0xA1B2_C3D4)); w.write(UInt16(2)); w.write(UInt16(4))
            w.write(UInt32(0)); w.write(UInt32(0)); w.write(UInt32(65_535 + 64)); w.write(linkType)
        case let .pcapng(linkType):
            // Section Header Block: byte-order magic, version 1.0, section length unknown.
            w.write(UInt32(0x0A0D_0D0A)); w.write(UInt32(28)); w.write(UInt32(0x1A2B_3C4D))
            w.write(UInt16(1)); w.write(UInt16(0)); w.write(UInt64.max); w.write(UInt32(28))
            // Interface Description Block (if_tsresol absent: microseconds).
            w.write(UInt32(1)); w.write(UInt32(20)); w.write(UInt16(truncatingIfNeeded: linkType)); w.write(UInt16(0))
            w.write(UInt32(65_535 + 64)); w.write(UInt32(20))
        }
        return w.bytes
    }

    /// The encoded record, or nil when this output cannot represent the record
    /// (a monitor-only record in an H4 file, bytes of no known packet type). A record
    /// whose bytes did not decode is written as it was read, so a conversion keeps it.
    public func record(_ rec: TraceRecord) -> [UInt8]? {
        let received = rec.direction == .controllerToHost
        var payload: [UInt8]
        var flags: UInt32 = received ? 1 : 0
        switch output {
        case .btsnoop(TraceFormat.btsnoopH1):
            guard let (type, body) = rec.hciBytes else { return nil }
            payload = body
            if type == .command || type == .event { flags |= 2 }
        case .btsnoop(TraceFormat.btsnoopMonitor), .pcap(TraceFormat.linkTypeMonitor), .pcapng(TraceFormat.linkTypeMonitor):
            let opcode: UInt16
            switch rec.content {
            case .packet, .undecodable(type: _?, _, _):
                guard let (type, body) = rec.hciBytes else { return nil }
                payload = body
                switch type {
                case .command: opcode = 2
                case .event: opcode = 3
                case .acl: opcode = received ? 5 : 4
                case .sco: opcode = received ? 7 : 6
                default: opcode = received ? 19 : 18
                }
            case let .monitor(op, data):
                opcode = op
                payload = data
            case .undecodable(type: .none, _, _):
                return nil
            }
            let index = rec.adapterIndex ?? 0
            if case .btsnoop = output {
                flags = UInt32(index) << 16 | UInt32(opcode)
            } else {
                payload = [UInt8(index >> 8), UInt8(index & 0xFF), UInt8(opcode >> 8), UInt8(opcode & 0xFF)] + payload
            }
        case .pcap(TraceFormat.linkTypeH4), .pcapng(TraceFormat.linkTypeH4):
            guard let (type, body) = rec.hciBytes else { return nil }
            payload = [type.rawValue] + body
        case .pcap, .pcapng:
            guard let (type, body) = rec.hciBytes else { return nil }
            payload = [0, 0, 0, received ? 1 : 0, type.rawValue] + body
        case .btsnoop:
            guard let (type, body) = rec.hciBytes else { return nil }
            payload = [type.rawValue] + body
        }
        var w = ByteWriter(capacity: payload.count + 24)
        switch output {
        case .btsnoop:
            w.writeBE(UInt32(payload.count)); w.writeBE(UInt32(payload.count)); w.writeBE(flags); w.writeBE(UInt32(0))
            w.writeBE(UInt64(bitPattern: rec.timestampMicros &+ btsnoopEpochDelta))
        case .pcap:
            w.write(UInt32(truncatingIfNeeded: rec.timestampMicros / 1_000_000))
            w.write(UInt32(truncatingIfNeeded: rec.timestampMicros % 1_000_000))
            w.write(UInt32(payload.count)); w.write(UInt32(payload.count))
        case .pcapng:
            let padded = (payload.count + 3) & ~3
            let total = UInt32(32 + padded)
            let ts = UInt64(bitPattern: rec.timestampMicros)
            w.write(UInt32(6)); w.write(total); w.write(UInt32(0))
            w.write(UInt32(truncatingIfNeeded: ts >> 32)); w.write(UInt32(truncatingIfNeeded: ts))
            w.write(UInt32(payload.count)); w.write(UInt32(payload.count))
            w.write(contentsOf: payload)
            w.write(contentsOf: repeatElement(0 as UInt8, count: padded - payload.count))
            w.write(total)
            return w.bytes
        }
        w.write(contentsOf: payload)
        return w.bytes
    }
}

/// Appends trace records to a file as they happen (thread-safe; each record is one write).
public final class TraceFileWriter: Sendable {
    private let fd: Int32
    private let encoder: TraceEncoder
    private let state = Mutex<(closed: Bool, error: String?, written: Int, unrepresentable: Int)>((false, nil, 0, 0))

    /// Creates (truncates) `path` and writes the header; `-` is standard output (for
    /// `wireshark -k -i -`).
    public init(path: String, output: TraceEncoder.Output = .btsnoop(datalink: TraceFormat.btsnoopH4)) throws {
        let fd = path == "-" ? dup(1) : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else {
            let e = errno
            throw TransportError.io(operation: "open \(path)", errno: e, reason: String(cString: strerror(e)))
        }
        self.fd = fd
        self.encoder = TraceEncoder(output)
        try writeAll(encoder.header)
    }

    /// Appends `record`. Returns false only when the file is already closed (a record
    /// this output cannot represent, or a write error, is counted instead).
    @discardableResult
    public func write(_ record: TraceRecord) -> Bool {
        guard let bytes = encoder.record(record) else {
            state.withLock { $0.unrepresentable += 1 }
            return true
        }
        do {
            guard try writeAll(bytes) else { return false }
            state.withLock { $0.written += 1 }
        } catch { state.withLock { $0.error = $0.error ?? "\(error)" } }
        return true
    }

    /// Records written, and records this output cannot represent (left out, counted).
    public var counts: (written: Int, unrepresentable: Int) { state.withLock { ($0.written, $0.unrepresentable) } }

    /// The first write error, if any (a recording never fails the session it records).
    public var error: String? { state.withLock { $0.error } }

    /// False when the file is closed.
    @discardableResult
    private func writeAll(_ bytes: [UInt8]) throws -> Bool {
        try state.withLock { s in
            guard !s.closed else { return false }
            var off = 0
            while off < bytes.count {
                let n = bytes[off...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                if n < 0 {
                    if errno == EINTR { continue }
                    let e = errno
                    throw TransportError.io(operation: "write trace", errno: e, reason: String(cString: strerror(e)))
                }
                off += n
            }
            return true
        }
    }

    public func close() {
        state.withLock { s in
            guard !s.closed else { return }
            s.closed = true
            _ = Glibc.close(fd)
        }
    }

    deinit { close() }
}

/// Wraps any transport and records every packet in both directions.
public final class RecordingTransport: HCITransport {
    public let base: any HCITransport
    private let sink: @Sendable (TraceRecord) -> Void
    private let now: @Sendable () -> Int64
    /// The file this transport writes and closes with itself (`init(wrapping:recordingTo:)`).
    public let file: TraceFileWriter?

    /// - Parameters:
    ///   - now: microseconds since the Unix epoch (injected so replays are deterministic).
    ///   - sink: receives each record, in order per direction.
    public init(wrapping base: any HCITransport, now: @escaping @Sendable () -> Int64 = RecordingTransport.wallClockMicros,
                sink: @escaping @Sendable (TraceRecord) -> Void) {
        self.base = base
        self.sink = sink
        self.now = now
        self.file = nil
    }

    /// Records into a new file at `path` (truncated), in the format its extension names
    /// (`TraceEncoder.Output(forPath:)`); the file is closed, everything written, when
    /// the transport closes.
    public init(wrapping base: any HCITransport, recordingTo path: String,
                now: @escaping @Sendable () -> Int64 = RecordingTransport.wallClockMicros) throws {
        let w = try TraceFileWriter(path: path, output: TraceEncoder.Output(forPath: path))
        self.base = base
        self.sink = { w.write($0) }
        self.now = now
        self.file = w
    }

    /// The base's packets, each recorded as it passes (read `inbound` or use `deliver`, not both).
    /// Pulled from the base's stream one at a time as the consumer asks: no buffer of
    /// its own, so the base's bound and back-pressure are the consumer's.
    public var inbound: AsyncThrowingStream<HCIPacket, any Error> {
        let source = Pull(base.inbound), sink = self.sink, now = self.now
        return AsyncThrowingStream(unfolding: {
            guard let p = try await source.next() else { return nil }
            sink(TraceRecord(timestampMicros: now(), packet: p, direction: .controllerToHost))
            return p
        })
    }

    /// An iterator the unfolding closure can hold: `AsyncThrowingStream(unfolding:)` calls
    /// it for one element at a time, never two at once.
    private final class Pull: @unchecked Sendable {
        private var iterator: AsyncThrowingStream<HCIPacket, any Error>.AsyncIterator
        init(_ stream: AsyncThrowingStream<HCIPacket, any Error>) { iterator = stream.makeAsyncIterator() }
        func next() async throws -> HCIPacket? { try await iterator.next() }
    }

    public convenience init(wrapping base: any HCITransport, writer: TraceFileWriter) {
        self.init(wrapping: base) { writer.write($0) }
    }

    public func deliver(on loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        let sink = self.sink, now = self.now
        base.deliver(on: loop) { input in
            if case let .packets(ps) = input {
                for p in ps { sink(TraceRecord(timestampMicros: now(), packet: p, direction: .controllerToHost)) }
            }
            receive(input)
        }
    }

    public func send(_ packet: HCIPacket) async throws {
        sink(TraceRecord(timestampMicros: now(), packet: packet, direction: .hostToController))
        try await base.send(packet)
    }

    public var sendsSynchronously: Bool { base.sendsSynchronously }

    public var preferredLoop: (any EventLoop)? { base.preferredLoop }

    public func sendNow(_ packets: [HCIPacket]) throws {
        for p in packets { sink(TraceRecord(timestampMicros: now(), packet: p, direction: .hostToController)) }
        try base.sendNow(packets)
    }

    public func sendNow(_ packet: HCIPacket) throws {
        sink(TraceRecord(timestampMicros: now(), packet: packet, direction: .hostToController))
        try base.sendNow(packet)
    }

    public func close() async {
        await base.close()
        file?.close()
    }

    public static let wallClockMicros: @Sendable () -> Int64 = {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000
    }
}
