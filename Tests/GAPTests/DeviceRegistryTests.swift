import HCI
import Testing
@testable import GAP

@Suite(.timeLimit(.minutes(3)))
struct DeviceRegistryTests {
    static let a = BluetoothAddress("00:00:00:00:00:0A")!
    static func adv(_ addr: BluetoothAddress, rssi: Int8, scanResponse: Bool = false, _ build: (inout AdvertisingData) -> Void) -> Advertisement {
        var d = AdvertisingData()
        build(&d)
        return Advertisement(address: addr, addressType: .public, rssi: rssi, eventType: scanResponse ? 4 : 0, data: d, raw: d.bytes)
    }

    @Test func advertisementAndScanResponseMerge() {
        var r = DeviceRegistry()
        r.record(Self.adv(Self.a, rssi: -60) { $0.flags = 6; $0.serviceUUIDs = [BluetoothUUID(0x180F)]; $0.txPowerLevel = 0 }, at: .seconds(1))
        let d = r.record(Self.adv(Self.a, rssi: -62, scanResponse: true) { $0.localName = "fire-alarm-sender"; $0.serviceUUIDs = [BluetoothUUID(0x1802)] }, at: .seconds(2))
        #expect(d.name == "fire-alarm-sender")
        #expect(d.merged.serviceUUIDs == [BluetoothUUID(0x180F), BluetoothUUID(0x1802)])
        #expect(d.isConnectable && d.reports == 2 && d.lastRSSI == -62)
        #expect(d.smoothedRSSI == -60.5)
        #expect(d.firstSeen == .seconds(1) && d.lastSeen == .seconds(2))
        // Filtering on the merged view: the name (scan response) and a service (advertisement) both match.
        #expect(r.matching(ScanFilter(names: ["fire-alarm-sender"], serviceUUIDs: [BluetoothUUID(0x180F)])).map(\.address) == [Self.a])
    }

    /// What only the advertisement says survives the merge: an incomplete service
    /// list stays incomplete unless the scan response completes it, and the
    /// structures the merge has no field for are kept.
    @Test func theMergeKeepsWhatOnlyTheAdvertisementSays() {
        var r = DeviceRegistry()
        r.record(Self.adv(Self.a, rssi: -60) {
            $0.serviceUUIDs = [BluetoothUUID(0x180F)]
            $0.serviceUUIDsComplete = false
            $0.connectionIntervalRange = 6...12
            $0.advertisingInterval = 160
            $0.leRole = 0
        }, at: .seconds(1))
        let d = r.record(Self.adv(Self.a, rssi: -62, scanResponse: true) { $0.localName = "x" }, at: .seconds(2))
        #expect(!d.merged.serviceUUIDsComplete)
        #expect(d.merged.connectionIntervalRange == 6...12 && d.merged.advertisingInterval == 160 && d.merged.leRole == 0)
        let completed = r.record(Self.adv(Self.a, rssi: -62, scanResponse: true) { $0.serviceUUIDs = [BluetoothUUID(0x1802)] }, at: .seconds(3))
        #expect(completed.merged.serviceUUIDsComplete)
    }

    @Test func keptAcrossReconnectionsAndBounded() {
        var r = DeviceRegistry(capacity: 2)
        r.connected(Self.a, type: .public, handle: 0x40, at: .seconds(1))
        #expect(r.connected.map(\.address) == [Self.a])
        r.disconnected(handle: 0x40)
        r.connected(Self.a, type: .public, handle: 0x41, at: .seconds(2))
        #expect(r.device(Self.a)?.connectionCount == 2)
        // Capacity 2: a third device evicts the oldest unconnected one, never a connected one.
        let b = BluetoothAddress("00:00:00:00:00:0B")!, c = BluetoothAddress("00:00:00:00:00:0C")!
        r.record(Self.adv(b, rssi: -70) { $0.localName = "b" }, at: .seconds(3))
        r.record(Self.adv(c, rssi: -70) { $0.localName = "c" }, at: .seconds(4))
        #expect(r.device(Self.a) != nil)
        #expect(r.device(b) == nil)
        #expect(r.all.map(\.address) == [c, Self.a])
    }
}

@Suite(.timeLimit(.minutes(3)))
struct UnavailableRSSITests {
    @Test func rssi127MeansNotMeasuredAndIsNotAveraged() {
        var r = DeviceRegistry()
        let a = BluetoothAddress("C0:00:00:00:00:07")!
        func ad(_ rssi: Int8) -> Advertisement { Advertisement(address: a, addressType: .public, rssi: rssi, eventType: 0, data: AdvertisingData(), raw: []) }
        r.record(ad(127), at: .zero)
        #expect(r.device(a)?.lastRSSI == nil && r.device(a)?.smoothedRSSI == nil && r.device(a)?.reports == 1)
        r.record(ad(-60), at: .seconds(1))
        r.record(ad(127), at: .seconds(2))
        #expect(r.device(a)?.lastRSSI == -60 && r.device(a)?.smoothedRSSI == -60)
    }
}
