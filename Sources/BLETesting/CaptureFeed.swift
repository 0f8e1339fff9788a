// CaptureFeed: the controller side of a capture fed to a host on a software
// controller (the replay that checks the host is Snoop's `ReplayTransport`).

import Foundation
import HCI
import NIOCore
import Snoop
import Synchronization

/// The second way to use a capture: only its controller side. A host on this transport
/// talks to a software controller (the virtual radio's, which answers every command as
/// a controller does and hears nobody), and `play()` hands it the capture's controller
/// packets that `selecting` picks — by default the advertising reports — in recorded
/// order, without checking anything the host sends. A scanner daemon fed the reports of
/// a real phone's capture (extended reports, damaged AD structures) shows what it
/// recognised.
public final class CaptureFeed: HCITransport {
    public let base: VirtualController
    /// The packets `play()` delivers, in recorded order.
    public let packets: [HCIPacket]
    private let target = Mutex<(loop: any EventLoop, receive: @Sendable (TransportInput) -> Void)?>(nil)

    /// LE Advertising Report, LE Extended Advertising Report, LE Directed Advertising Report.
    public static let advertisingReports: @Sendable (HCIPacket) -> Bool = { p in
        guard case let .event(code, parameters) = p, code == .leMeta, let sub = parameters.first else { return false }
        return [0x02, 0x0B, 0x0D].contains(sub)
    }

    /// `address`: the software controller's public address.
    public init(trace: Trace, address: BluetoothAddress = BluetoothAddress("C0:FE:ED:00:00:01")!,
                selecting: @Sendable (HCIPacket) -> Bool = CaptureFeed.advertisingReports) async {
        base = await VirtualRadio().makeController(address: address)
        packets = trace.records.compactMap { r in
            guard r.direction == .controllerToHost, let p = r.packet, selecting(p) else { return nil }
            return p
        }
    }

    public convenience init(contentsOf path: String, selecting: @Sendable (HCIPacket) -> Bool = CaptureFeed.advertisingReports) async throws {
        await self.init(trace: try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))), selecting: selecting)
    }

    /// Delivers the selected packets to the host (after it has started), in order, and
    /// returns once it has taken them. Returns how many.
    @discardableResult
    public func play() async throws -> Int {
        guard let (loop, receive) = target.withLock({ $0 }) else { throw BLETestingError.notStarted("CaptureFeed.play(): start the host first") }
        let batch = packets
        try await loop.submit { receive(.packets(batch)) }.get()
        return batch.count
    }

    public var inbound: AsyncThrowingStream<HCIPacket, any Error> { base.inbound }
    public func send(_ packet: HCIPacket) async throws { try await base.send(packet) }
    public func close() async {
        await base.close()
        target.withLock { $0 = nil }
    }
    public func deliver(on loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        target.withLock { $0 = (loop, receive) }
        base.deliver(on: loop, receive)
    }
    public var preferredLoop: (any EventLoop)? { base.preferredLoop }
    public var sendsSynchronously: Bool { base.sendsSynchronously }
    public func sendNow(_ packets: [HCIPacket]) throws { try base.sendNow(packets) }
    public func sendNow(_ packet: HCIPacket) throws { try base.sendNow(packet) }
}

/// Misuse of the testing kit, saying what to do.
public enum BLETestingError: Error, Equatable, CustomStringConvertible {
    case notStarted(String)
    public var description: String {
        switch self {
        case let .notStarted(what): return what
        }
    }
}
