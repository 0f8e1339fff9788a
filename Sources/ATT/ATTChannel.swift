// What an ATT bearer runs over: whole PDUs in and out. Two implementations: the
// ATT fixed channel of one LE connection in our user-space L2CAP, and (in
// Transports) the kernel's L2CAP ATT socket.

import HCI
import L2CAP
import NIOCore

public protocol ATTChannel: Sendable {
    /// The event loop the bearer over this channel runs on (the controller's, for our L2CAP).
    var loop: any EventLoop { get }
    /// Sends one PDU.
    func send(_ pdu: [UInt8]) async throws
    /// PDUs from the peer; ends when the link goes away.
    var inbound: AsyncStream<[UInt8]> { get }
    /// Why the link went away, once it has (for the errors of pending operations).
    var closeReason: String { get async }
}

/// The ATT channel (CID 0x0004) of one connection of an `L2CAPHost`.
public struct L2CAPATTChannel: ATTChannel {
    public let host: L2CAPHost
    public let handle: UInt16
    public let inbound: AsyncStream<[UInt8]>

    public init(host: L2CAPHost, handle: UInt16) async {
        self.host = host
        self.handle = handle
        self.inbound = await host.frames(on: .att, handle: handle)
    }

    public func send(_ pdu: [UInt8]) async throws { try await host.send(pdu, on: .att, handle: handle) }

    public var loop: any EventLoop { host.loop }

    public var closeReason: String { "connection 0x\(String(handle, radix: 16)) closed" }
}
