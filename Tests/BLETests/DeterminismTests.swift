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

/// The two programs of the Battery Service flow, as a daemon author writes them.
enum BatteryFlow {
    /// Opens once the peripheral advertises.
    final class Advertising: Sendable {
        private let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        func open() { continuation.yield(); continuation.finish() }
        func wait() async { for await _ in stream {} }
    }

    /// Publishes 0x180F/0x2A19 (read, notify), advertises as "Battery", notifies three
    /// values once a central subscribes, returns when that central has left. `beacon`:
    /// a non-connectable advertising set beside it (extended commands only).
    static func peripheral(_ host: BluetoothHost, advertising: Advertising? = nil, beacon: Bool = false) async throws {
        let level = Characteristic(uuid: BluetoothUUID(0x2A19), properties: [.read, .notify], value: [100])
        try await host.peripheral.add(Service(uuid: BluetoothUUID(0x180F), characteristics: [level]))
        var ad = AdvertisingData()
        ad.localName = "Battery"
        ad.serviceUUIDs = [BluetoothUUID(0x180F)]
        let events = host.peripheral.events(), links = host.connectionEvents()
        try await host.peripheral.startAdvertising(ad)
        if beacon {
            var b = AdvertisingData()
            b.manufacturerData = [IBeacon(uuid: BluetoothUUID(0x180F), major: 1, minor: 2, measuredPower: -59).manufacturerData]
            _ = try await host.peripheral.addAdvertisingSet(b)
        }
        advertising?.open()
        for await e in events {
            if case .subscriptionChanged(_, _, notify: true, _) = e {
                for v: UInt8 in [99, 98, 97] { try await host.peripheral.notify(level, value: [v]) }
                break
            }
        }
        for await e in links { if case .disconnected = e { break } }
    }

    /// Scans with `first(matching:)`, connects, reads, takes three values from a
    /// subscription loop, leaves the loop, disconnects. Returns the values.
    static func central(_ host: BluetoothHost) async throws -> [[UInt8]] {
        guard let found = try await host.central.first(matching: ScanFilter(names: ["Battery"]), within: .seconds(5)) else {
            throw BLEError.notSupported("no Battery peripheral found")
        }
        let remote = try await host.central.connect(to: found)
        let c = try await remote.characteristic(BluetoothUUID(0x2A19))
        guard try await remote.read(c) == [100] else { throw BLEError.notSupported("unexpected battery level") }
        var values: [[UInt8]] = []
        for try await v in try await remote.subscribe(to: c) {
            values.append(v)
            if values.count == 3 { break }
        }
        try await remote.disconnect()
        return values
    }
}

@Suite(.timeLimit(.minutes(3))) struct DeterminismTests {
    static let runs = 50

    /// The Battery Service flow of the issue on the virtual radio, both hosts recorded.
    /// `extendedAdvertising`: on Bluetooth 5 controllers (both hosts then use the
    /// extended commands, and the peripheral advertises a beacon set too).
    static func batterySession(recordCentralTo path: String? = nil, recordPeripheralTo ppath: String? = nil,
                               extendedAdvertising: Bool = false) async throws -> (central: [HCIPacket], peripheral: [HCIPacket]) {
        let radio = VirtualRadio()
        let centralTraffic = HostTraffic(), peripheralTraffic = HostTraffic()
        let a = BluetoothAddress("C0:00:00:00:0B:01")!, b = BluetoothAddress("C0:00:00:00:0B:02")!
        func tap(_ t: any HCITransport, _ traffic: HostTraffic) -> any HCITransport { RecordingTransport(wrapping: t, sink: traffic.record) }
        let ct = tap(await radio.makeController(address: a, extendedAdvertising: extendedAdvertising), centralTraffic)
        let pt = tap(await radio.makeController(address: b, extendedAdvertising: extendedAdvertising), peripheralTraffic)
        let central = try path.map { try BluetoothHost(transport: ct, recordingTo: $0, logger: Bench.logger) } ?? BluetoothHost(transport: ct, logger: Bench.logger)
        let peripheral = try ppath.map { try BluetoothHost(transport: pt, recordingTo: $0, logger: Bench.logger) } ?? BluetoothHost(transport: pt, logger: Bench.logger)
        try await central.start()
        try await peripheral.start()
        try await withThrowingTaskGroup(of: Void.self) { g in
            let advertising = BatteryFlow.Advertising()
            g.addTask { try await BatteryFlow.peripheral(peripheral, advertising: advertising, beacon: extendedAdvertising) }
            await advertising.wait()
            #expect(try await BatteryFlow.central(central) == [[99], [98], [97]])
            try await g.waitForAll()
        }
        await central.close()
        await peripheral.close()
        return (centralTraffic.sent, peripheralTraffic.sent)
    }

    /// The central's conversation is its own program's: identical in every run, in
    /// total order. The peripheral answers a central whose requests arrive while it is
    /// restarting its advertising, as two real devices would: how its commands and its
    /// ATT responses interleave follows thread timing, but each flow (its commands, its
    /// data on each link) must be identical in every run, which is what a replay checks.
    /// The same on Bluetooth 5 controllers, driven with the extended commands, the
    /// peripheral advertising a beacon set beside the connectable one.
    @Test(arguments: [false, true])
    func batteryFlowSendsTheSameConversationEveryRun(extendedAdvertising: Bool) async throws {
        let first = try await Self.expectRepeats(names: ("central", "peripheral")) {
            let run = try await Self.batterySession(extendedAdvertising: extendedAdvertising)
            return (run.central, run.peripheral)
        }
        #expect(first.program.count > 20 && first.server.count > 20)
        let connect: HCIOpcode = extendedAdvertising ? .leExtendedCreateConnection : .leCreateConnection
        #expect(first.program.contains { if case .command(connect, _) = $0 { return true } else { return false } })
        let beaconSet = first.server.contains {
            guard case let .command(.leSetExtendedAdvertisingParameters, p) = $0 else { return false }
            return p.first == 1
        }
        #expect(beaconSet == extendedAdvertising)
    }

    /// Runs a session `runs` times: the program's conversation must equal the first
    /// run's in total order, the server's flow by flow. Returns the first run's.
    static func expectRepeats(names: (String, String), _ session: () async throws -> (program: [HCIPacket], server: [HCIPacket])) async throws
        -> (program: [HCIPacket], server: [HCIPacket]) {
        let first = try await session()
        for run in 2...runs {
            let again = try await session()
            let program = again.program == first.program
            let server = ReplayFlows(again.server) == ReplayFlows(first.server)
            #expect(program, "\(names.0), run \(run): \(firstDifference(first.program, again.program))")
            #expect(server, "\(names.1), run \(run): \(flowDifference(first.server, again.server))")
            if !program || !server { break }
        }
        return first
    }

    /// Where two conversations compared flow by flow first differ: the flow, then
    /// its first differing packet.
    static func flowDifference(_ a: [HCIPacket], _ b: [HCIPacket]) -> String {
        let fa = ReplayFlows(a).flows, fb = ReplayFlows(b).flows
        for k in Set(fa.keys).union(fb.keys).sorted() where fa[k] != fb[k] {
            return "flow 0x\(String(k, radix: 16)): \(firstDifference(fa[k] ?? [], fb[k] ?? []))"
        }
        return "no flow differs"
    }

    /// One fire-alarm session on the virtual radio (short scan: CI time), both hosts
    /// recorded to files; returns each host's packets.
    ///
    /// The alarm follows the receiver's progress: the sender raises it once the
    /// receiver read the alarm state clear and said it is watching. On a timer after
    /// the subscription instead (50 ms), a receiver stalled longer than that between its
    /// CCCD write and its read under the full suite's load (about 1 run in 13) got the
    /// indication first, and both conversations changed.
    static func fireAlarmSession(keep: Bool = false) async throws -> (receiver: [HCIPacket], sender: [HCIPacket], files: (String, String)) {
        let r = ReplayKitTests.temporaryPath("receiver.btsnoop"), s = ReplayKitTests.temporaryPath("sender.btsnoop")
        defer { if !keep { unlink(r); unlink(s) } }
        let outcome = try await FireAlarmDemo.run(alarmAfter: .zero, scanTime: .milliseconds(20), limit: .seconds(20),
                                                  recordSenderTo: s, recordReceiverTo: r, logger: Bench.logger, log: { _ in })
        #expect(outcome.floorPlan == FireAlarmProfile.defaultFloorPlan)
        func sent(_ path: String) throws -> [HCIPacket] {
            try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))).records
                .filter { $0.direction == .hostToController }.compactMap(\.packet)
        }
        return (try sent(r), try sent(s), (r, s))
    }

    /// The receiver is a program run to its end: the same conversation every run. The
    /// sender raises its alarm on a timer and resumes advertising while the receiver
    /// talks to it, so it is compared flow by flow.
    @Test func fireAlarmSessionSendsTheSameConversationEveryRun() async throws {
        let first = try await Self.expectRepeats(names: ("receiver", "sender")) {
            let run = try await Self.fireAlarmSession()
            return (run.receiver, run.sender)
        }
        #expect(first.program.count > 30)
    }

    /// The fire-alarm receiver replayed against its own recording: it finds the sender,
    /// subscribes, handles the alarm (text, RSSI, floor plan, acknowledgement) with no
    /// sender and no radio, just the recorded controller.
    @Test func fireAlarmReceiverReplaysAgainstItsRecording() async throws {
        let recorded = try await Self.fireAlarmSession(keep: true)
        defer { unlink(recorded.files.0); unlink(recorded.files.1) }
        for _ in 0..<5 {
            let replay = try ReplayTransport(contentsOf: recorded.files.0)
            let host = BluetoothHost(transport: replay, logger: Bench.logger)
            try await host.start()
            let receiver = FireAlarmReceiver(host: host, name: "receiver-02", scanTime: .milliseconds(20), log: { _ in })
            try await receiver.run(once: true)
            #expect(await receiver.floorPlans.last == FireAlarmProfile.defaultFloorPlan)
            await host.close()
            try await replay.finished()
        }
    }

    /// A windowed scan holds what the controller sent before it answered the scan
    /// stop, however late the host got to it: a recording's reports moved to just
    /// before that answer (the controller sent them while the host was already
    /// stopping) still count in the replay; moved after it, none does.
    @Test func aWindowedScanHoldsTheReportsSentBeforeTheStopWasAnswered() async throws {
        let radio = VirtualRadio()
        let path = ReplayKitTests.temporaryPath("window.btsnoop")
        defer { unlink(path) }
        let advertiser = BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0C:01")!), logger: Bench.logger)
        let scanner = try BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0C:02")!),
                                        recordingTo: path, logger: Bench.logger)
        try await advertiser.start()
        try await scanner.start()
        var ad = AdvertisingData()
        ad.localName = "Window"
        try await advertiser.peripheral.startAdvertising(ad)
        let heard = try await scanner.central.scan(for: .milliseconds(30))
        #expect(!heard.isEmpty && heard.allSatisfy { $0.name == "Window" })
        await scanner.close()
        await advertiser.close()

        let recorded = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: path))))
        let isReport = { (r: TraceRecord) in r.packet.map(CaptureFeed.advertisingReports) ?? false }
        let reports = recorded.records.filter(isReport)
        let rest = recorded.records.filter { !isReport($0) }
        // The host's LE Set Scan Enable (off) and the Command Complete answering it.
        let stop = LESetScanEnable(scanEnable: false).packet
        let sent = try #require(rest.firstIndex { $0.direction == .hostToController && $0.packet == stop })
        let answered = try #require(rest[sent...].firstIndex { r in
            guard case let .commandComplete(cc)? = r.packet.flatMap({ try? HCIEvent($0) }) else { return false }
            return cc.commandOpcode == .leSetScanEnable
        })
        func replayed(_ records: [TraceRecord]) async throws -> [ScanResult] {
            let replay = ReplayTransport(trace: Trace(format: recorded.format, records: records))
            let host = BluetoothHost(transport: replay, logger: Bench.logger)
            try await host.start()
            let results = try await host.central.scan(for: .milliseconds(30))
            await host.close()
            try await replay.finished()
            return results
        }
        let late = Array(rest[..<answered]) + reports + Array(rest[answered...])
        #expect(try await replayed(late).map(\.name) == heard.map(\.name))
        let tooLate = Array(rest[...answered]) + reports + Array(rest[(answered + 1)...])
        #expect(try await replayed(tooLate).isEmpty)
    }
}
