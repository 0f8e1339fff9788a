// The one protocol every transport implements: the BlueZ HCI socket, H4 over a
// TCP or unix socket, a serial tty or pty, the scripted transport for tests and
// the recording tap. Transports do I/O; nothing above them does.

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
public protocol HCITransport: AnyObject, Sendable {
    var inbound: AsyncThrowingStream<HCIPacket, any Error> { get }
    func send(_ packet: HCIPacket) async throws
    /// Closes the link; `inbound` finishes. Idempotent.
    func close() async
}
