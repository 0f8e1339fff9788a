// A device leaving the virtual radio (`VirtualRadio.remove`, what `btctl radio` does
// when a host disconnects): its peers see their links end as a vanished device's do.

import BLE
import BLETesting
import HCI
import Testing

/// `VirtualRadio.remove` (what `btctl radio` does when a host leaves): the device
/// vanishes, so its peer's link ends with Connection Timeout, and it is heard no more.
@Suite(.timeLimit(.minutes(3))) struct RadioRemovalTests {
    @Test func aRemovedControllersPeerSeesItsLinkTimeOut() async throws {
        let radio = VirtualRadio()
        let (ca, pa) = (BluetoothAddress("C0:00:00:00:00:0A")!, BluetoothAddress("C0:00:00:00:00:0B")!)
        let central = BluetoothHost(transport: await radio.makeController(address: ca), logger: Bench.logger)
        let gone = await radio.makeController(address: pa)
        let peripheral = BluetoothHost(transport: gone, logger: Bench.logger)
        defer { Task { await central.close(); await peripheral.close() } }
        try await central.start()
        try await peripheral.start()
        try await peripheral.peripheral.startAdvertising(AdvertisingData())
        let links = central.connectionEvents()
        let remote = try await central.central.connect(to: pa, within: .seconds(5))
        await radio.remove(gone)
        let ended = await firstElement(links.compactMap { e -> HCIStatus? in
            if case let .disconnected(_, reason) = e { return reason }
            return nil
        }, within: .seconds(5))
        #expect(ended == .connectionTimeout)
        #expect(await remote.disconnection(within: .seconds(1)) == .disconnected(reason: .connectionTimeout))
        #expect(try await central.central.scan(for: .milliseconds(200)).filter { $0.address == pa }.isEmpty)
    }
}
