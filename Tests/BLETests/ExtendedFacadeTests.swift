// The facade on controllers with extended advertising (the virtual radio's Bluetooth 5
// controllers): advertisements longer than legacy PDUs carry, heard whole; the limit
// connectable advertising has; a host told to use the legacy commands on such a
// controller; advertising going on for the next central after a link ends.

import BLE
import BLETesting
import GAP
import HCI
import Testing

@Suite(.timeLimit(.minutes(3))) struct ExtendedFacadeTests {
    static func manufacturer(_ n: Int) -> AdvertisingData {
        var ad = AdvertisingData()
        ad.localName = "extended"
        ad.manufacturerData = [.init(companyIdentifier: 0xFFFF, data: (0..<n).map { UInt8($0 & 0xFF) })]
        return ad
    }

    @Test func aLongAdvertisementIsHeardWholeAndConnectedTo() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let (central, peripheral) = (await room.central.usesExtendedCommands, await room.peripherals[0].usesExtendedCommands)
        #expect(central && peripheral)
        let ad = Self.manufacturer(200)
        try await room.peripherals[0].peripheral.startAdvertising(ad)
        let heard = try await room.central.central.scan(for: .milliseconds(200))
        let whole = heard.first { $0.address == room.addresses[0] }
        #expect(whole?.advertisement.raw == ad.bytes)
        #expect(whole?.name == "extended" && whole?.advertisement.isConnectable == true)
        #expect(whole?.advertisement.data.manufacturerData.first?.data.count == 200)
        let remote = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        #expect(try await remote.discoverServices().isEmpty == false)
        try await remote.disconnect()
    }

    /// Connectable extended advertising is one AUX_ADV_IND: 246 octets. More is refused
    /// before anything is sent, saying so; non-connectable advertising chains, up to
    /// the controller's 1650.
    @Test func connectableAdvertisingHoldsWhatOnePDUHolds() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let peripheral = room.peripherals[0].peripheral
        let long = Self.manufacturer(300)
        await #expect(throws: AdvertisingDataError.tooLong(length: long.bytes.count, limit: 246)) { try await peripheral.startAdvertising(long) }
        try await peripheral.startAdvertising(Self.manufacturer(1600), connectable: false)
        let heard = try await room.central.central.scan(for: .milliseconds(200))
        #expect(heard.first { $0.address == room.addresses[0] }?.advertisement.raw == Self.manufacturer(1600).bytes)
        await #expect(throws: AdvertisingDataError.tooLong(length: Self.manufacturer(1700).bytes.count, limit: 1650)) {
            try await peripheral.startAdvertising(Self.manufacturer(1700), connectable: false)
        }
    }

    /// `extendedCommands: .never` on a controller that has them: initialisation does
    /// not read the advertising sets (an extended command, after which the controller
    /// would refuse the legacy ones), and legacy advertising works; an extended
    /// central still connects to its legacy PDUs.
    @Test func aHostToldToUseLegacyCommandsCanOnAnExtendedController() async throws {
        let radio = VirtualRadio()
        let address = BluetoothAddress("C0:00:00:00:0E:01")!
        let legacy = BluetoothHost(transport: await radio.makeController(address: address, extendedAdvertising: true),
                                   logger: Bench.logger, extendedCommands: .never)
        let info = try await legacy.start()
        defer { Task { await legacy.close() } }
        #expect(info.supportsExtendedAdvertising && info.maximumAdvertisingDataLength == nil)
        #expect(await !legacy.usesExtendedCommands)
        try await legacy.peripheral.startAdvertising(Self.manufacturer(10))
        let central = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0E:02")!, extendedAdvertising: true),
                                    logger: Bench.logger)
        try await central.start()
        defer { Task { await central.close() } }
        let heard = try await central.central.scan(for: .milliseconds(200))
        #expect(heard.first { $0.address == address }?.name == "extended")
        let remote = try await central.central.connect(to: address, within: .seconds(5))
        try await remote.disconnect()
    }

    /// The set stops when a central connects (LE Advertising Set Terminated); the
    /// facade starts it again when that link ends, so the next central connects.
    @Test func advertisingGoesOnForTheNextCentral() async throws {
        let room = try await Room(peripherals: 1, extendedAdvertising: true)
        defer { Task { await room.close() } }
        let server = room.peripherals[0]
        try await server.peripheral.startAdvertising(Self.manufacturer(100))
        let events = server.connectionEvents()
        let first = try await room.central.central.connect(to: room.addresses[0], within: .seconds(5))
        try await first.disconnect()
        for await e in events { if case .disconnected = e { break } }
        let other = BluetoothHost(transport: await room.radio.makeController(address: BluetoothAddress("C0:00:00:00:0E:03")!, extendedAdvertising: true),
                                  logger: Bench.logger)
        try await other.start()
        defer { Task { await other.close() } }
        let second = try await other.central.connect(to: room.addresses[0], within: .seconds(5))
        try await second.disconnect()
    }
}
