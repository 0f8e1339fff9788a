// The facade's ordering promise: the same program on the same inputs sends the same
// HCI conversation every run. Each flow runs 50 times on the virtual radio (which
// has no timers of its own) with both hosts' transports recorded; every run's
// host-to-controller packets must equal the first run's, byte for byte.

import BLE
import BLETesting
import FireAlarm
import Foundation
import HCI
import Snoop
import Synchronization
import Testing

/// Every packet a host sends, in order.
final class HostTraffic: Sendable {
    private let packets = Mutex<[HCIPacket]>([])
    func record(_ r: TraceRecord) {
        guard r.direction == .hostToController, let p = r.packet else { return }
        packets.withLock { $0.append(p) }
    }
    var sent: [HCIPacket] { packets.withLock { $0 } }
}

/// The first packet where two runs differ, for the failure message.
func firstDifference(_ a: [HCIPacket], _ b: [HCIPacket]) -> String {
    for i in 0..<max(a.count, b.count) {
        let x = i < a.count ? a[i].h4Bytes.hexString : "nothing", y = i < b.count ? b[i].h4Bytes.hexString : "nothing"
        if x != y { return "packet \(i): first run \(x), this run \(y)" }
    }
    return "identical"
}

@Suite struct DeterminismTests {
    static let runs = 50

    /// The Battery Service flow of the issue: a peripheral publishing 0x180F/0x2A19
    /// with notifications; a central that scans with `first(matching:)`, connects,
    /// reads, takes three notified values from a subscription loop, leaves the loop
    /// and disconnects.
    static func batterySession() async throws -> (central: [HCIPacket], peripheral: [HCIPacket]) {
        let radio = VirtualRadio()
        let centralTraffic = HostTraffic(), peripheralTraffic = HostTraffic()
        let a = BluetoothAddress("C0:00:00:00:0B:01")!, b = BluetoothAddress("C0:00:00:00:0B:02")!
        let central = BluetoothHost(transport: RecordingTransport(wrapping: await radio.makeController(address: a), sink: centralTraffic.record),
                                    logger: Bench.logger)
        let peripheral = BluetoothHost(transport: RecordingTransport(wrapping: await radio.makeController(address: b), sink: peripheralTraffic.record),
                                       logger: Bench.logger)
        try await central.start()
        try await peripheral.start()
        let level = Characteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], value: [100])
        try await peripheral.peripheral.add(Service(uuid: BluetoothUUID(0x180F), characteristics: [level]))
        var ad = AdvertisingData()
        ad.localName = "Battery"
        ad.serviceUUIDs = [BluetoothUUID(0x180F)]
        try await peripheral.peripheral.startAdvertising(ad)
        let events = peripheral.peripheral.events()
        // A child task: it shares the session's executor preference.
        async let notified: Void = {
            for await e in events {
                if case .subscriptionChanged(_, _, notify: true, _) = e {
                    for v: UInt8 in [99, 98, 97] { try await peripheral.peripheral.notify(level, value: [v]) }
                    return
                }
            }
        }()

        let found = try #require(try await central.central.first(matching: ScanFilter(names: ["Battery"]), within: .seconds(5)))
        let remote = try await central.central.connect(to: found)
        let c = try await remote.characteristic(BluetoothUUID(0x2A19))
        #expect(try await remote.read(c) == [100])
        var values: [[UInt8]] = []
        for try await v in try await remote.subscribe(to: c) {
            values.append(v)
            if values.count == 3 { break }
        }
        #expect(values == [[99], [98], [97]])
        let peripheralLinks = peripheral.connectionEvents()
        try await remote.disconnect()
        try await notified
        // The peripheral's program ends when its side of the link has ended (it then resumes advertising).
        for await e in peripheralLinks { if case .disconnected = e { break } }
        await central.close()
        await peripheral.close()
        return (centralTraffic.sent, peripheralTraffic.sent)
    }

    /// The central's conversation is its own program's: identical in every run, in
    /// total order. The peripheral answers a central whose requests arrive while it is
    /// restarting its advertising, as two real devices would: how its commands and its
    /// ATT responses interleave follows thread timing, but each flow (its commands, its
    /// data on each link) must be identical in every run, which is what a replay checks.
    @Test func batteryFlowSendsTheSameConversationEveryRun() async throws {
        let first = try await Self.batterySession()
        #expect(first.central.count > 20)
        #expect(first.peripheral.count > 20)
        for run in 2...Self.runs {
            let again = try await Self.batterySession()
            let central = again.central == first.central
            let peripheral = ReplayFlows(again.peripheral) == ReplayFlows(first.peripheral)
            #expect(central, "central, run \(run): \(firstDifference(first.central, again.central))")
            #expect(peripheral, "peripheral, run \(run): \(firstDifference(first.peripheral, again.peripheral))")
            if !central || !peripheral { return }
        }
    }
}
