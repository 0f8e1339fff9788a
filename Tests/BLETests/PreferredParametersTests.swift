// Peripheral Preferred Connection Parameters through the facade: a peripheral host
// states them in its GAP service, a central reads them and gives the link what they
// ask (BlueZ reads them; Bumble reads ours in BtctlServeTests), and a value outside
// §12.3's ranges is refused at start, never served.

import BLE
import BLETesting
import GATT
import HCI
import Testing

@Suite struct PreferredParametersTests {
    @Test func aCentralGivesThePeripheralTheConnectionItPrefers() async throws {
        let radio = VirtualRadio()
        let none = PreferredConnectionParameters.noPreference
        let prefers = PreferredConnectionParameters(intervalMin: 24, intervalMax: 40, latency: 2, supervisionTimeout: none)
        let central = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0C:21")!), logger: Bench.logger)
        let address = BluetoothAddress("C0:00:00:00:0C:22")!, plain = BluetoothAddress("C0:00:00:00:0C:23")!
        let peripheral = BluetoothHost(transport: await radio.makeController(address: address), logger: Bench.logger,
                                       preferredConnectionParameters: prefers)
        let other = BluetoothHost(transport: await radio.makeController(address: plain), logger: Bench.logger)
        for h in [central, peripheral, other] { try await h.start() }
        defer { Task { for h in [central, peripheral, other] { await h.close() } } }
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("ppcp"))
        try await other.peripheral.startAdvertising(AdvertisingSetsTests.named("plain"))
        let remote = try await central.central.connect(to: address, within: .seconds(5))
        #expect(try await remote.preferredConnectionParameters() == prefers)
        // The virtual controller takes the longest interval allowed; no timeout
        // preference: 5 s, more than (1 + 2) × 50 ms × 2.
        #expect(try await remote.updateToPreferredParameters() == ConnectionParameters(interval: 40, latency: 2, supervisionTimeout: 500))
        let plainRemote = try await central.central.connect(to: plain, within: .seconds(5))
        #expect(try await plainRemote.preferredConnectionParameters() == nil)
        #expect(try await plainRemote.updateToPreferredParameters() == nil)
        withExtendedLifetime(radio) {}
    }

    @Test func valuesOutsideTheSpecsRangesAreRefusedAtStart() async throws {
        let radio = VirtualRadio()
        let host = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0C:24")!), logger: Bench.logger,
                                 preferredConnectionParameters: PreferredConnectionParameters(intervalMin: 40, intervalMax: 24, supervisionTimeout: 500))
        defer { Task { await host.close() } }
        await #expect { try await host.start() } throws: { e in
            if case BLEError.invalidArgument = e { return true } else { return false }
        }
        withExtendedLifetime(radio) {}
    }
}
