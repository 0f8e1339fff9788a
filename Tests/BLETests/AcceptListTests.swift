// Advertising that answers the accept list alone (`AdvertisingFilter`, the
// Advertising_Filter_Policy of §7.8.5 and §7.8.53): only the devices named with
// `setAcceptList` connect, or get the scan response. The controller's Filter Accept
// List holds that list while such advertising is on: `setAcceptList` and
// `connect(toAnyOf:)` may not change it meanwhile (the controller refuses, §7.8.15–
// §7.8.17). On the virtual radio, with both command sets, and on Rootcanal.

import BLE
import BLETesting
import HCI
import Testing

@Suite(.serialized) struct AcceptListTests {
    static let a = BluetoothAddress("C0:00:00:00:0A:11")!, b = BluetoothAddress("C0:00:00:00:0A:12")!
    static let p = BluetoothAddress("C0:00:00:00:0A:13")!

    static func hosts(_ radio: VirtualRadio, extended: Bool) async throws -> (BluetoothHost, BluetoothHost, BluetoothHost) {
        var out: [BluetoothHost] = []
        for address in [a, b, p] {
            let h = BluetoothHost(transport: await radio.makeController(address: address, extendedAdvertising: extended), logger: Bench.logger)
            try await h.start()
            out.append(h)
        }
        return (out[0], out[1], out[2])
    }

    static func inUse(_ e: any Error) -> Bool {
        if case BLEError.acceptListInUse = e { return true } else { return false }
    }

    @Test(arguments: [false, true])
    func onlyTheAcceptListConnects(extended: Bool) async throws {
        let radio = VirtualRadio()
        let (centralA, centralB, peripheral) = try await Self.hosts(radio, extended: extended)
        defer { Task { await centralA.close(); await centralB.close(); await peripheral.close() } }
        try await peripheral.setAcceptList([DeviceAddress(Self.a)])
        #expect(await peripheral.acceptList == [DeviceAddress(Self.a)])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("only-a"), acceptListOnly: .connections)
        // B is not on the list: the advertiser does not take its connection request.
        await #expect(throws: BLEError.connectionTimeout(Self.p, within: .milliseconds(300))) {
            try await centralB.central.connect(to: Self.p, within: .milliseconds(300))
        }
        let remote = try await centralA.central.connect(to: Self.p, within: .seconds(5))
        // The controller's list is the advertisement's while it is on (or waits for A's link to end).
        await #expect { try await peripheral.setAcceptList([DeviceAddress(Self.b)]) } throws: { Self.inUse($0) }
        await #expect { try await peripheral.central.connect(toAnyOf: [DeviceAddress(Self.b), DeviceAddress(Self.a)], within: .seconds(1)) } throws: {
            Self.inUse($0)
        }
        try await peripheral.setAcceptList([DeviceAddress(Self.a)])
        _ = try await remote.disconnect()
        // Stopped, the list changes; started again, it is B's turn.
        try await peripheral.peripheral.stopAdvertising()
        try await peripheral.setAcceptList([DeviceAddress(Self.b)])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("only-b"), acceptListOnly: .connections)
        await #expect(throws: BLEError.connectionTimeout(Self.p, within: .milliseconds(300))) {
            try await centralA.central.connect(to: Self.p, within: .milliseconds(300))
        }
        _ = try await centralB.central.connect(to: Self.p, within: .seconds(5))
        // More than the controller's list holds (16 here).
        await #expect(throws: BLEError.self) {
            try await centralA.setAcceptList((0..<17).map { DeviceAddress(BluetoothAddress(value: 0x0B00 + UInt64($0))) })
        }
        withExtendedLifetime(radio) {}
    }

    @Test(arguments: [false, true])
    func onlyTheAcceptListGetsTheScanResponse(extended: Bool) async throws {
        let radio = VirtualRadio()
        let (centralA, centralB, peripheral) = try await Self.hosts(radio, extended: extended)
        defer { Task { await centralA.close(); await centralB.close(); await peripheral.close() } }
        try await peripheral.setAcceptList([DeviceAddress(Self.a)])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("beacon"), scanResponse: AdvertisingSetsTests.named("more"),
                                                         connectable: false, acceptListOnly: .scanRequests)
        #expect(try await AdvertisingSetsTests.heard(by: centralA)[Self.p] == ["beacon", "more"])
        #expect(try await AdvertisingSetsTests.heard(by: centralB)[Self.p] == ["beacon"])
        withExtendedLifetime(radio) {}
    }

    /// After a reset the controller's list is empty: advertising that resumes refills it.
    @Test func theListIsRefilledAfterAReset() async throws {
        let radio = VirtualRadio()
        let (centralA, centralB, peripheral) = try await Self.hosts(radio, extended: true)
        defer { Task { await centralA.close(); await centralB.close(); await peripheral.close() } }
        try await peripheral.setAcceptList([DeviceAddress(Self.a)])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("only-a"), acceptListOnly: .connections)
        try await peripheral.reset()
        _ = try await centralA.central.connect(to: Self.p, within: .seconds(5))
        withExtendedLifetime(radio) {}
    }

    /// On Rootcanal, which checks the advertiser's filter policy as the spec does.
    @Test func onRootcanalOnlyTheAcceptListConnects() async throws {
        guard let rc = try await Bench.rootcanalHosts(3) else { return }
        defer { rc.stop() }
        let (peripheral, centralA, centralB) = (rc.hosts[0], rc.hosts[1], rc.hosts[2])
        let p = rc.addresses[0]
        try await peripheral.setAcceptList([DeviceAddress(rc.addresses[1])])
        try await peripheral.peripheral.startAdvertising(AdvertisingSetsTests.named("rc-only-a"), acceptListOnly: .connections)
        await #expect(throws: BLEError.connectionTimeout(p, within: .seconds(1))) { try await centralB.central.connect(to: p, within: .seconds(1)) }
        _ = try await centralA.central.connect(to: p, within: .seconds(10))
        await #expect { try await peripheral.setAcceptList([DeviceAddress(rc.addresses[2])]) } throws: { Self.inUse($0) }
    }
}
