// The one protocol every transport implements: the BlueZ HCI socket, H4 over a
// TCP or unix socket, a serial tty or pty, the scripted transport for tests and
// the recording tap. Transports do I/O; nothing above them does.

import NIOCore

/// Why a transport stopped.
public enum TransportError: Error, Equatable, Sendable, CustomStringConvertible {
    /// Closed by our side (`close()`).
    case closed
    /// The peer closed the connection (end of file on a stream).
    case endOfStream
    /// The byte stream could not be framed (H4 out of sync, bad packet).
    case framing(DecodeError)
    /// A system call failed; `reason` is for a person.
    case io(operation: String, errno: Int32, reason: String)
    /// Cannot open: `reason` says what to do about it.
    case unavailable(String)

    public var description: String {
        switch self {
        case .closed: return "transport closed"
        case .endOfStream: return "the controller closed the connection"
        case let .framing(e): return "transport framing error: \(e)"
        case let .io(op, errno, reason): return "\(op) failed (errno \(errno)): \(reason)"
        case let .unavailable(reason): return reason
        }
    }
}

/// A bidirectional HCI packet link to one controller.
///
/// `inbound` yields controller-to-host packets in arrival order. It can be iterated
/// once; it finishes normally after `close()`, and throws `TransportError` when the
/// link fails (end of stream, I/O error, framing error). After it ends, `send` throws.
/// Each transport says how `inbound` buffers (a `ChannelTransport` stops reading while
/// its consumer falls behind; none drops without counting).
public protocol HCITransport: AnyObject, Sendable {
    var inbound: AsyncThrowingStream<HCIPacket, any Error> { get }
    func send(_ packet: HCIPacket) async throws
    /// Closes the link; `inbound` finishes. Idempotent.
    func close() async

    /// Instead of `inbound` (use one or the other): hands inbound packets to `receive`
    /// on `loop`, in arrival order, then `.ended` once. A transport that reads on its
    /// own thread hands over batches and stops reading while too many wait on the loop
    /// (back-pressure reaches the controller's flow control). The default forwards
    /// `inbound`, one packet at a time, each handled before the next is taken.
    func deliver(on loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void)
    /// The event loop a host on this transport should run on, if the transport has one
    /// (an in-process controller does: its host then shares its thread). Default nil.
    var preferredLoop: (any EventLoop)? { get }
    /// Whether `sendNow` writes (true) or the caller must use `send` (false, the default).
    var sendsSynchronously: Bool { get }
    /// Writes `packets` in order from the caller's thread, one write per packet.
    func sendNow(_ packets: [HCIPacket]) throws
    /// `sendNow(_:)` of one packet (what the host does per ACL fragment: no array to
    /// allocate). The default wraps it in one.
    func sendNow(_ packet: HCIPacket) throws
}

/// What `HCITransport.deliver(on:_:)` hands over.
public enum TransportInput: Sendable {
    case packets([HCIPacket])
    /// The link ended: nil after `close()`, else why (a `TransportError`).
    case ended((any Error)?)
}

extension HCITransport {
    public func deliver(on loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        let inbound = self.inbound
        Task {
            do {
                for try await p in inbound { try await loop.submit { receive(.packets([p])) }.get() }
                loop.execute { receive(.ended(nil)) }
            } catch {
                loop.execute { receive(.ended(error)) }
            }
        }
    }

    public var sendsSynchronously: Bool { false }

    public var preferredLoop: (any EventLoop)? { nil }

    public func sendNow(_ packets: [HCIPacket]) throws { throw TransportError.unavailable("this transport sends asynchronously") }

    public func sendNow(_ packet: HCIPacket) throws { try sendNow([packet]) }
}
