// Connection handles at the top of their range (Vol 4, Part E, §5.4.2: 0x0000–0x0EFF;
// an ACL header carries 12 bits). The virtual radio once counted handles up without
// end: after 1,888 links (a day of a daemon reconnecting) it reported 0x0F00 and up,
// which no ACL packet can name, and each new link's first ATT request went
// unanswered for 30 s (found by a churn of 3,000 links: link 2,017 got handle 0x1000,
// and its ACL data arrived as handle 0x0000); at 32,767 links its counter would have
// trapped. A host given such a handle by a controller takes the connection as failed.

import BLE
import BLETesting
@testable import HCI
import Logging
import Testing
@testable import VirtualHCI

/// What a faulty controller's LE (Enhanced) Connection Complete gives the host:
/// handle 0x0F00; every other packet as it is.
func raisingTheHandle(_ p: HCIPacket) -> HCIPacket {
    // Subevents 0x01, 0x0A and 0x29 put status, then the handle, first.
    guard case .event(.leMeta, var b) = p, b.count >= 4, [0x01, 0x0A, 0x29].contains(b[0]), b[1] == 0 else { return p }
    (b[2], b[3]) = (0x00, 0x0F)
    return .event(code: .leMeta, parameters: b)
}

extension VirtualRadio {
    func startHandleSearch(at handle: UInt16) { nextHandle = handle }
}

@Suite(.timeLimit(.minutes(3))) struct ConnectionHandleTests {
    static let peripheralAddresses = [BluetoothAddress("C0:00:00:00:0D:21")!, BluetoothAddress("C0:00:00:00:0D:22")!]

    /// A radio whose handle search stands at the top of the range: the next links get
    /// 0x0EFC, then 0x0EFE, then (0x0F00 being none) 0x0040 again, skipping a pair a
    /// live link still holds; every link carries a read.
    @Test func handlesWrapWithinTheRangeAndSkipThoseHeld() async throws {
        let radio = VirtualRadio()
        let central = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0D:20")!), logger: Bench.logger)
        let peripherals = [
            BluetoothHost(transport: await radio.makeController(address: Self.peripheralAddresses[0]), logger: Bench.logger),
            BluetoothHost(transport: await radio.makeController(address: Self.peripheralAddresses[1]), logger: Bench.logger),
        ]
        try await central.start()
        for p in peripherals {
            try await p.start()
            try await p.peripheral.add(Service(uuid: uuidA, characteristics: [Characteristic(uuid: uuidB, properties: [.read], value: [7])]))
        }
        defer { Task { await central.close(); for p in peripherals { await p.close() } } }
        func link(_ i: Int) async throws -> RemotePeripheral {
            try await peripherals[i].peripheral.startAdvertising(AdvertisingData())
            let remote = try await central.central.connect(to: Self.peripheralAddresses[i], within: .seconds(5))
            #expect(try await remote.read(try await remote.characteristic(uuidB)) == [7])
            return remote
        }
        await radio.startHandleSearch(at: 0x0EFC)
        let first = try await link(0)
        #expect(first.connection.handle == 0x0EFC)
        try await first.disconnect()
        // Held from here on: the search that comes round to 0x0040 must pass it.
        let held = try await link(0)
        #expect(held.connection.handle == 0x0EFE)
        #expect(await peripherals[0].connections.first?.handle == 0x0EFF)
        let wrapped = try await link(1)
        #expect(wrapped.connection.handle == 0x0040)
        try await wrapped.disconnect()
        await radio.startHandleSearch(at: 0x0EFE)
        let skipped = try await link(1)
        #expect(skipped.connection.handle == 0x0040)
        #expect(try await held.read(try await held.characteristic(uuidB)) == [7])
    }

    /// A controller that reports a connection with handle 0x0F00: the connect ends at
    /// once with Invalid HCI Command Parameters, as Linux takes it, and the host holds
    /// no link (before, the link came up and its first ATT request waited 30 s).
    @Test func aConnectionWithAHandleNoPacketCanNameFailsAtOnce() async throws {
        let radio = VirtualRadio()
        let address = Self.peripheralAddresses[0]
        let central = BluetoothHost(transport: InjectingTransport(await radio.makeController(address: BluetoothAddress("C0:00:00:00:0D:20")!), rewrite: raisingTheHandle),
                                    logger: Bench.logger)
        let peripheral = BluetoothHost(transport: await radio.makeController(address: address), logger: Bench.logger)
        try await central.start()
        try await peripheral.start()
        defer { Task { await central.close(); await peripheral.close() } }
        try await peripheral.peripheral.startAdvertising(AdvertisingData())
        await #expect(throws: BLEError.connectionFailed(address, .invalidCommandParameters)) {
            _ = try await central.central.connect(to: address, within: .seconds(5))
        }
        #expect(await central.connections.isEmpty)
    }

    /// What the host takes as failed: success with a handle above 0x0EFF, in either
    /// event; 0x0EFF itself, and a failure, stay as they came.
    @Test func onlyAHandleAboveTheRangeIsTakenAsFailed() throws {
        let logger = Logger(label: "t") { _ in SwiftLogNoOpLogHandler() }
        func event(_ subevent: UInt8, status: UInt8, handle: UInt16) throws -> HCIEvent {
            let length = subevent == 0x01 ? 18 : 30
            var b = [subevent, status, UInt8(handle & 0xFF), UInt8(handle >> 8)] + [UInt8](repeating: 0, count: length - 3)
            b[4] = 0  // central
            return try HCIEvent(code: .leMeta, parameters: b)
        }
        for subevent: UInt8 in [0x01, 0x0A] {
            let status = { (e: HCIEvent) -> HCIStatus? in
                switch e {
                case let .le(.connectionComplete(c)): c.status
                case let .le(.enhancedConnectionComplete(c)): c.status
                default: nil
                }
            }
            #expect(status(HCIController.addressable(try event(subevent, status: 0, handle: 0x0F00), logger: logger)) == .invalidCommandParameters)
            #expect(status(HCIController.addressable(try event(subevent, status: 0, handle: 0x0EFF), logger: logger)) == .success)
            #expect(status(HCIController.addressable(try event(subevent, status: 0x3E, handle: 0x0F00), logger: logger)) == HCIStatus(rawValue: 0x3E))
        }
    }
}
