// A credit-based channel (LE or enhanced mode) as the application holds it: SDUs in as an
// AsyncSequence (each SDU's credits go back to the peer when you take it, so the
// peer can never have more in flight than we buffer), `send` that waits for the
// peer's credits, `close`. The state lives in the link's `L2CAPHost`, on its loop.

import HCI
import Synchronization

/// Why a channel operation failed or a channel's SDU sequence ended abnormally.
public enum L2CAPChannelError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The peer refused our connection request with this result (§4.23).
    case refused(CreditBasedConnectionResult)
    /// No response to our request within the RTX timeout (§6.2.1).
    case timedOut
    /// The link is not up (or went down while we waited).
    case linkClosed(handle: UInt16)
    /// All 64 LE dynamic CIDs of the link are in use, or the parameters are out of range.
    case noResources
    /// The channel ended for this reason.
    case closed(ChannelCloseReason)
    /// The SDU is longer than the peer's MTU.
    case sduTooLong(Int, mtu: Int)
    /// Our Credit Based Reconfigure Request was refused (by the peer, or before sending
    /// because the peer would refuse it).
    case reconfigureRefused(CreditBasedReconfigureResult)

    public var description: String {
        switch self {
        case let .refused(r): return "connection refused: \(r)"
        case .timedOut: return "no response to the connection request"
        case let .linkClosed(h): return "link 0x\(hex4(h)) is not connected"
        case .noResources: return "no channel identifiers left on the link, or parameters out of range"
        case let .closed(r): return "channel \(r)"
        case let .sduTooLong(n, mtu): return "SDU of \(n) bytes exceeds the peer's MTU \(mtu)"
        case let .reconfigureRefused(r): return "reconfiguration refused: \(r)"
        }
    }
}

/// A credit-based channel whichever stack carries it: this one (`L2CAPChannel`) or
/// the kernel's L2CAP socket (`KernelL2CAPChannel` in BlueZATT). SDUs in as an
/// AsyncSequence that ends when the channel closes in order and throws when it is
/// lost; `send` that waits for the peer's credits (never drops, never queues without
/// bound); the largest SDU the peer takes; `close`.
public protocol SDUChannel: Sendable {
    associatedtype SDUSequence: AsyncSequence, Sendable where SDUSequence.Element == [UInt8]
    /// The SDUs the peer sends, in order. Iterate once.
    var sdus: SDUSequence { get }
    /// The largest SDU `send` takes (the peer's MTU).
    var maximumSendSize: Int { get }
    /// Sends one SDU, waiting for the peer's credits as long as it takes.
    func send(_ sdu: [UInt8]) async throws
    /// Closes the channel: the peer sees it end; our `sdus` end.
    func close() async
}

public final class L2CAPChannel: SDUChannel, CustomStringConvertible {
    public let host: L2CAPHost
    /// The link's connection handle.
    public let handle: UInt16
    private let current: Mutex<CreditBasedChannelInfo>

    init(host: L2CAPHost, handle: UInt16, info: CreditBasedChannelInfo) {
        self.host = host
        self.handle = handle
        self.current = Mutex(info)
    }

    /// SPSM, both CIDs, both sides' MTU / MPS / initial credits, the mode. The MTU and
    /// MPS change when either side reconfigures an enhanced-mode channel.
    public var info: CreditBasedChannelInfo { current.withLock { $0 } }

    func update(_ info: CreditBasedChannelInfo) { current.withLock { $0 = info } }

    /// Enhanced mode only: lets the peer send SDUs up to `mtu` and K-frames up to `mps`
    /// (§4.27; the MTU may only grow). Returns once the peer accepted; `info` then
    /// shows the new values. Throws `L2CAPChannelError.reconfigureRefused`.
    public func reconfigure(mtu: UInt16, mps: UInt16) async throws {
        try await host.reconfigure([self], mtu: mtu, mps: mps)
    }

    /// The largest SDU `send` takes (the peer's MTU).
    public var maximumSendSize: Int { Int(info.remote.mtu) }

    /// Sends one SDU; returns once its last K-frame is in the controller's hands, which
    /// may wait for the peer's credits. Throws `L2CAPChannelError`.
    public func send(_ sdu: [UInt8]) async throws {
        try await host.sendSDU(sdu, handle: handle, localCID: info.localCID)
    }

    /// Closes the channel (Disconnection Request) and returns once the peer answered
    /// (or 30 s passed, or the link went); SDUs not yet sent fail with `closed`.
    public func close() async {
        await host.closeChannel(handle: handle, localCID: info.localCID)
    }

    /// For a layer that consumes SDUs synchronously (an EATT bearer), called on the
    /// host's loop: every SDU goes to `deliver` on the loop as it arrives (its credits
    /// straight back), then `.closed` once. `sdus` then yields nothing.
    public func setReceiver(_ deliver: @escaping @Sendable (ChannelInput) -> Void) {
        let localCID = info.localCID
        host.onLoop { $0.setChannelReceiver(handle: handle, localCID: localCID, deliver) }
    }

    /// Called on the host's loop: queues `sdu` behind the ones before it without
    /// waiting (it goes out as the peer's credits allow); `done` hears whether its last
    /// K-frame reached the controller. Returns false, without calling `done`, when the
    /// channel is closed or the SDU is longer than the peer's MTU.
    public func write(_ sdu: [UInt8], done: (@Sendable (Bool) -> Void)?) -> Bool {
        // A struct, not a tuple: a closure inside a tuple argument costs `onLoop` an
        // allocation per call.
        host.onLoop(Outgoing(sdu: sdu, handle: handle, localCID: info.localCID, done: done)) {
            $0.writeSDU($1.sdu, handle: $1.handle, localCID: $1.localCID, done: $1.done)
        }
    }

    private struct Outgoing {
        let sdu: [UInt8]
        let handle: UInt16
        let localCID: UInt16
        let done: (@Sendable (Bool) -> Void)?
    }

    /// Why the channel ended, once it has.
    public var closeReason: ChannelCloseReason? {
        get async { await host.closeReason(handle: handle, localCID: info.localCID) }
    }

    /// The SDUs the peer sends, in order. Ends (nil) when either side closes the channel;
    /// throws `L2CAPChannelError.closed` when the link is lost or the peer broke the
    /// flow-control rules. Buffer: what our credits allow, nothing more. Iterate once.
    /// A reader whose task is cancelled stops waiting with `CancellationError`; the
    /// channel stays open, and the next SDU goes to the next reader.
    public var sdus: SDUs { SDUs(channel: self) }

    public struct SDUs: AsyncSequence, Sendable {
        let channel: L2CAPChannel
        public func makeAsyncIterator() -> Iterator { Iterator(channel: channel) }

        public struct Iterator: AsyncIteratorProtocol {
            let channel: L2CAPChannel
            public mutating func next() async throws -> [UInt8]? {
                try await channel.host.nextSDU(handle: channel.handle, localCID: channel.info.localCID)
            }
        }
    }

    public var description: String {
        let info = self.info
        return "L2CAP \(info.enhanced ? "enhanced " : "")channel SPSM 0x\(hex4(info.spsm)) on 0x\(hex4(handle)): CID 0x\(hex4(info.localCID)) ↔ 0x\(hex4(info.remoteCID)), MTU \(info.local.mtu)/\(info.remote.mtu), MPS \(info.local.mps)/\(info.remote.mps)"
    }
}
