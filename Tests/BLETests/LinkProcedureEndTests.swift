// A link procedure the host waits on ends with the link: `updatePHY`,
// `updateParameters`, `updateDataLength` and `remoteFeatures` throw
// `BLEError.disconnected` with the link's reason as soon as it goes, not when their
// limit passes. The central's controller here is a virtual one whose answer to the
// procedure never reaches the host (LE PHY Update Complete, LE Connection Update
// Complete, LE Data Length Change or LE Read Remote Features Complete taken out of
// its events).

import BLE
import BLETesting
import HCI
import NIOCore
import Testing

/// `base` with the controller's packets that `drops` matches taken out; `sent` sees
/// each packet the host sends.
final class DroppingTransport: HCITransport {
    let base: any HCITransport
    let drops: @Sendable (HCIPacket) -> Bool
    let sent: @Sendable (HCIPacket) -> Void

    init(wrapping base: any HCITransport, dropping drops: @escaping @Sendable (HCIPacket) -> Bool,
         sent: @escaping @Sendable (HCIPacket) -> Void = { _ in }) {
        self.base = base
        self.drops = drops
        self.sent = sent
    }

    private final class Pull: @unchecked Sendable {
        private var iterator: AsyncThrowingStream<HCIPacket, any Error>.AsyncIterator
        init(_ stream: AsyncThrowingStream<HCIPacket, any Error>) { iterator = stream.makeAsyncIterator() }
        func next() async throws -> HCIPacket? { try await iterator.next() }
    }

    var inbound: AsyncThrowingStream<HCIPacket, any Error> {
        let source = Pull(base.inbound), drops = self.drops
        return AsyncThrowingStream(unfolding: {
            while let p = try await source.next() { if !drops(p) { return p } }
            return nil
        })
    }

    func deliver(on loop: any EventLoop, _ receive: @escaping @Sendable (TransportInput) -> Void) {
        let drops = self.drops
        base.deliver(on: loop) { input in
            guard case let .packets(ps) = input else { return receive(input) }
            let kept = ps.filter { !drops($0) }
            if !kept.isEmpty { receive(.packets(kept)) }
        }
    }

    func send(_ packet: HCIPacket) async throws {
        sent(packet)
        try await base.send(packet)
    }
    var sendsSynchronously: Bool { base.sendsSynchronously }
    var preferredLoop: (any EventLoop)? { base.preferredLoop }
    func sendNow(_ packets: [HCIPacket]) throws {
        for p in packets { sent(p) }
        try base.sendNow(packets)
    }
    func sendNow(_ packet: HCIPacket) throws {
        sent(packet)
        try base.sendNow(packet)
    }
    func close() async { await base.close() }
}

@Suite(.timeLimit(.minutes(3))) struct LinkProcedureEndTests {
    /// A central whose controller's LE meta events with `subevent` never reach it, and a
    /// peripheral it is connected to; the peripheral's view of the link; the commands
    /// the central sends. The radio is the caller's to keep (its controllers hold it
    /// weakly).
    static func link(on radio: VirtualRadio, hiding subevent: UInt8) async throws
        -> (BluetoothHost, BluetoothHost, RemotePeripheral, Connection, AsyncStream<HCIOpcode>) {
        let controller = await radio.makeController(address: BluetoothAddress("C0:00:00:00:00:01")!, extendedAdvertising: true)
        let (commands, command) = AsyncStream<HCIOpcode>.makeStream(bufferingPolicy: .bufferingNewest(64))
        let central = BluetoothHost(transport: DroppingTransport(wrapping: controller, dropping: { p in
            if case let .event(code, parameters) = p, code == .leMeta, parameters.first == subevent { return true }
            return false
        }, sent: { p in
            if case let .command(op, _) = p { command.yield(op) }
        }), logger: Bench.logger)
        try await central.start()
        let peripheral = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:01:00")!, extendedAdvertising: true),
                                       logger: Bench.logger)
        try await peripheral.start()
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("p"))
        let links = peripheral.connectionEvents()
        let remote = try await central.central.connect(to: BluetoothAddress("C0:00:00:00:01:00")!, within: .seconds(5))
        let link = try #require(await firstElement(links.compactMap { e -> Connection? in if case let .connected(c) = e { return c } else { return nil } },
                                                   within: .seconds(5)))
        return (central, peripheral, remote, link, commands)
    }

    /// Runs `body` (which waits up to 60 s), ends the link from the peripheral once the
    /// central has sent `op` (`body` waits for its answer by then), and returns how
    /// `body` ended, or CancellationError if it had not within 5 s.
    static func endedByTheLink(_ peripheral: BluetoothHost, _ link: Connection, after op: HCIOpcode, _ commands: AsyncStream<HCIOpcode>,
                               _ body: @escaping @Sendable () async throws -> Void) async -> (any Error)? {
        let waiting = Task { () -> (any Error)? in
            do { try await body(); return nil } catch { return error }
        }
        #expect(await firstElement(commands.filter { $0 == op }, within: .seconds(5)) != nil)
        _ = try? await peripheral.disconnect(link, reason: .remoteUserTerminatedConnection)
        return await firstElement(AsyncStream<(any Error)?> { k in
            Task { k.yield(await waiting.value); k.finish() }
        }, within: .seconds(5)) ?? CancellationError()
    }

    /// A procedure the host waits on: the LE meta subevent that answers it, the
    /// command that starts it, and the call.
    enum Procedure: String, CaseIterable, Sendable {
        case phyUpdate, parameterUpdate, dataLengthUpdate, featureRead

        var answer: UInt8 {
            switch self {
            case .phyUpdate: return 0x0C
            case .parameterUpdate: return 0x03
            case .dataLengthUpdate: return 0x07
            case .featureRead: return 0x04
            }
        }
        var command: HCIOpcode {
            switch self {
            case .phyUpdate: return .leSetPHY
            case .parameterUpdate: return .leConnectionUpdate
            case .dataLengthUpdate: return .leSetDataLength
            case .featureRead: return .leReadRemoteFeatures
            }
        }
        func run(_ remote: RemotePeripheral) async throws {
            switch self {
            case .phyUpdate: _ = try await remote.updatePHY(within: .seconds(60))
            case .parameterUpdate: _ = try await remote.updateParameters(intervalMin: 0x10, intervalMax: 0x10, supervisionTimeout: 0x100, within: .seconds(60))
            case .dataLengthUpdate: _ = try await remote.updateDataLength(within: .seconds(60))
            case .featureRead: _ = try await remote.remoteFeatures(within: .seconds(60))
            }
        }
    }

    @Test(arguments: Procedure.allCases)
    func aProcedureEndsWithTheLink(_ procedure: Procedure) async throws {
        let radio = VirtualRadio()
        let (central, peripheral, remote, link, commands) = try await Self.link(on: radio, hiding: procedure.answer)
        defer { Task { await central.close(); await peripheral.close() } }
        let error = await Self.endedByTheLink(peripheral, link, after: procedure.command, commands) { try await procedure.run(remote) }
        #expect(error as? BLEError == .disconnected(reason: .remoteUserTerminatedConnection), "\(procedure): \(String(describing: error))")
        withExtendedLifetime(radio) {}
    }
}
