// What an ATT bearer runs over: whole PDUs in and out, on one event loop. Three
// implementations: the ATT fixed channel of one LE connection in our user-space
// L2CAP (handed over synchronously on the controller's loop), an enhanced
// credit-based channel to SPSM 0x0027 (EATT: one PDU per SDU), and (in BlueZATT) the
// kernel's L2CAP ATT socket.

import HCI
import L2CAP
import NIOCore

/// What a channel delivers: each PDU in order, then `.closed` once.
public typealias ATTChannelInput = ChannelInput

public protocol ATTChannel: Sendable {
    /// The event loop the channel delivers on; the bearer over it runs there too.
    var loop: any EventLoop { get }
    /// Starts delivering what the peer sends: each PDU in order, then `.closed` once,
    /// all on `loop`. Called once, on `loop`.
    func open(_ deliver: @escaping @Sendable (ATTChannelInput) -> Void)
    /// Queues one PDU, on `loop`, behind the ones before it; `done` is called once it is
    /// handed to the link (true) or dropped because the link went away (false).
    /// Returns false, without calling `done`, when the link is already gone.
    func write(_ pdu: [UInt8], done: (@Sendable (Bool) -> Void)?) -> Bool
    /// Why the link went away, once it has (for the errors of pending operations).
    var closeReason: String { get }
}

/// The ATT channel (CID 0x0004) of one connection of an `L2CAPHost`.
public struct L2CAPATTChannel: ATTChannel {
    public let host: L2CAPHost
    public let handle: UInt16

    /// Frames that arrive before the bearer opens the channel wait in the host.
    public init(host: L2CAPHost, handle: UInt16) {
        self.host = host
        self.handle = handle
    }

    public var loop: any EventLoop { host.loop }

    public func open(_ deliver: @escaping @Sendable (ATTChannelInput) -> Void) {
        host.onLoop { $0.setReceiver(.att, handle: handle, deliver) }
    }

    public func write(_ pdu: [UInt8], done: (@Sendable (Bool) -> Void)?) -> Bool {
        // Handed over as a struct to a closure that captures nothing: no allocation per
        // PDU (`onLoop(_:_:)`).
        host.onLoop(Outgoing(pdu: pdu, handle: handle, done: done)) { $0.enqueue($1.pdu, on: .att, handle: $1.handle, done: $1.done) }
    }

    private struct Outgoing {
        let pdu: [UInt8]
        let handle: UInt16
        let done: (@Sendable (Bool) -> Void)?
    }

    public var closeReason: String { "connection 0x\(hex4(handle)) closed" }
}

/// An enhanced ATT bearer's channel (EATT): an L2CAP enhanced credit-based channel
/// (Vol 3, Part A, §4.25) to SPSM 0x0027, one ATT PDU per SDU.
public struct EATTChannel: ATTChannel {
    /// The SPSM of EATT.
    public static let spsm: UInt16 = 0x0027
    public let channel: L2CAPChannel

    public init(channel: L2CAPChannel) { self.channel = channel }

    public var loop: any EventLoop { channel.host.loop }

    public func open(_ deliver: @escaping @Sendable (ATTChannelInput) -> Void) { channel.setReceiver(deliver) }

    public func write(_ pdu: [UInt8], done: (@Sendable (Bool) -> Void)?) -> Bool { channel.write(pdu, done: done) }

    public var closeReason: String {
        "EATT channel 0x\(hex4(channel.info.localCID)) on connection 0x\(hex4(channel.handle)) closed"
    }
}
