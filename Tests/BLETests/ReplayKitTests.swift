// The replay kit at the facade: a session recorded with `BluetoothHost(transport:
// recordingTo:)` replays against the same program, run after run; a program that
// deviates fails at once with the frame and both packets by name; the controller side
// of a capture feeds a scanner.

import BLE
import BLETesting
import Foundation
import HCI
import Snoop
import Testing

@Suite(.timeLimit(.minutes(3))) struct ReplayKitTests {
    static func temporaryPath(_ name: String) -> String {
        NSTemporaryDirectory() + "replay-\(getpid())-\(UInt64.random(in: 0...UInt64.max))-\(name)"
    }

    /// Records both hosts of the battery flow once (btsnoop for the central, pcapng for
    /// the peripheral: the recording format follows the extension).
    static func recordBatterySession() async throws -> (central: String, peripheral: String) {
        let c = temporaryPath("central.btsnoop"), p = temporaryPath("peripheral.pcapng")
        _ = try await DeterminismTests.batterySession(recordCentralTo: c, recordPeripheralTo: p)
        return (c, p)
    }

    @Test func recordingsAreCompleteCapturesInTheirFormats() async throws {
        let (c, p) = try await Self.recordBatterySession()
        defer { unlink(c); unlink(p) }
        let central = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: c))))
        let peripheral = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: p))))
        #expect(central.format == .btsnoop(datalink: TraceFormat.btsnoopH4))
        guard case .pcapng = peripheral.format else { Issue.record("\(peripheral.format)"); return }
        #expect(central.damage == nil && peripheral.damage == nil)
        // Closed with the host: the last frames are the Disconnection Complete's aftermath, not cut short.
        #expect(central.records.contains { $0.packet == Disconnect(connectionHandle: 0x40).packet })
        #expect(central.records.first?.packet == Reset().packet)
    }

    @Test func theCentralReplaysAgainstItsRecordingEveryRun() async throws {
        let (c, p) = try await Self.recordBatterySession()
        defer { unlink(c); unlink(p) }
        for _ in 0..<20 {
            let replay = try ReplayTransport(contentsOf: c)
            let host = BluetoothHost(transport: replay, logger: Bench.logger)
            try await host.start()
            #expect(try await BatteryFlow.central(host) == [[99], [98], [97]])
            try await replay.finished(within: .seconds(5))
            await host.close()
        }
    }

    @Test func thePeripheralReplaysAgainstItsRecording() async throws {
        let (c, p) = try await Self.recordBatterySession()
        defer { unlink(c); unlink(p) }
        for _ in 0..<10 {
            // Same inputs, same conversation, per flow (the default). Not in total order:
            // the peripheral resumes advertising while it answers the central's first
            // requests, and about one recording in 40 had the resumption's last command
            // (LE Set Advertising Enable) after ATT exchanges that followed its previous
            // Command Complete (the central's requests reached the recording host's loop
            // before the resumption's task did). The replay hands each request in a job
            // queued when the host packet before it is sent, after the resumption was
            // queued, so the host sends that command first, in every replay of that
            // recording. The advertising commands are declared independent: they may go
            // ahead of links' data.
            let replay = try ReplayTransport(contentsOf: p, options: Self.independent)
            let host = BluetoothHost(transport: replay, logger: Bench.logger)
            try await host.start()
            try await BatteryFlow.peripheral(host)
            await host.close()
            try await replay.finished(within: .seconds(5))
        }
    }

    @Test func aDeviatingHostFailsAtOnceWithTheDecodedMismatch() async throws {
        let (c, p) = try await Self.recordBatterySession()
        defer { unlink(c); unlink(p) }
        let replay = try ReplayTransport(contentsOf: c)
        let host = BluetoothHost(transport: replay, logger: Bench.logger)
        try await host.start()
        let found = try #require(try await host.central.first(matching: ScanFilter(names: ["Battery"]), within: .seconds(5)))
        let remote = try await host.central.connect(to: found)
        let level = try await remote.characteristic(BluetoothUUID(0x2A19))
        // The recording reads here; this program writes instead.
        let start = ContinuousClock.now
        do {
            try await remote.write([1], to: level)
            Issue.record("the write went through a replay that expected a read")
        } catch {
            #expect(ContinuousClock.now - start < .seconds(1), "failed only after \(ContinuousClock.now - start)")
            #expect("\(error)".contains("replay mismatch at frame"), "\(error)")
        }
        let m = try #require(replay.mismatch)
        #expect(m.expectedDecoded?.contains("Read Request") == true, "\(m)")
        #expect(m.actualDecoded?.contains("Write Request") == true, "\(m)")
        #expect(m.frame > 20)
        await #expect(throws: m) { try await replay.finished(within: .seconds(1)) }
        await host.close()
    }

    @Test func aSilentHostFailsAfterTheReplayTimeout() async throws {
        let (c, p) = try await Self.recordBatterySession()
        defer { unlink(c); unlink(p) }
        let replay = try ReplayTransport(contentsOf: c, options: ReplayOptions(timeout: .milliseconds(200)))
        let host = BluetoothHost(transport: replay, logger: Bench.logger)
        try await host.start()
        // The recording goes on with a scan; this program does nothing.
        let error = await #expect(throws: ReplayMismatch.self) { try await replay.finished(within: .seconds(5)) }
        #expect(error?.actual == nil)
        #expect(error?.expected?.type == .command, "\(String(describing: error))")
        // The host learns it from its transport: closed, with the mismatch as the reason.
        let closed = await firstElement(host.states().filter { if case .transportClosed = $0 { true } else { false } }, within: .seconds(5))
        #expect("\(String(describing: closed))".contains("replay mismatch at frame"), "\(String(describing: closed))")
        await host.close()
    }

    @Test func optionsLetRecordedDifferencesPass() async throws {
        // A recording whose host also asked for LE Rand, with the peer at another address:
        // the program here never asks for LE Rand, and the peer it meets is elsewhere.
        let (c, p) = try await Self.recordBatterySession()
        defer { unlink(c); unlink(p) }
        var trace = try TraceReader.read([UInt8](try Data(contentsOf: URL(fileURLWithPath: c))))
        let rand = TraceRecord(timestampMicros: 0, packet: .command(opcode: .leRand, parameters: []), direction: .hostToController)
        let randDone = TraceRecord(timestampMicros: 0, packet: HCIEvent.commandComplete(CommandComplete(commandOpcode: .leRand,
                                   returnParameters: [0, 7, 0, 0, 0, 0, 0, 0, 0])).packet, direction: .controllerToHost)
        let eventMask = try #require(trace.records.firstIndex { if case .command(.leSetEventMask, _)? = $0.packet { true } else { false } })
        trace.records.insert(contentsOf: [rand, randDone], at: eventMask + 2)
        let strict = ReplayTransport(trace: trace, options: ReplayOptions(timeout: .milliseconds(300)))
        let strictHost = BluetoothHost(transport: strict, logger: Bench.logger)
        await #expect(throws: (any Error).self) { try await strictHost.start(); _ = try await BatteryFlow.central(strictHost) }
        await strictHost.close()

        let replay = ReplayTransport(trace: trace, options: ReplayOptions(ignoredCommands: [.leRand]))
        let host = BluetoothHost(transport: replay, logger: Bench.logger)
        try await host.start()
        #expect(try await BatteryFlow.central(host).count == 3)
        try await replay.finished()
        await host.close()
    }

    static func trace(_ records: [(HCIPacket, TraceRecord.Direction)]) -> Trace {
        Trace(format: .btsnoop(datalink: TraceFormat.btsnoopH4),
              records: records.map { TraceRecord(timestampMicros: 0, packet: $0.0, direction: $0.1) })
    }

    static func acl(_ att: [UInt8]) -> HCIPacket {
        .acl(ACLDataPacket(handle: 0x41, boundary: .firstNonFlushable, data: [UInt8(att.count), 0, 4, 0] + att))
    }

    static func complete(_ op: HCIOpcode) -> HCIPacket {
        HCIEvent.commandComplete(CommandComplete(commandOpcode: op, returnParameters: [0])).packet
    }

    /// What a replay hands the host, once it has taken `count` packets.
    static func handed(_ replay: ReplayTransport, _ count: Int) async throws -> [HCIPacket] {
        var handed: [HCIPacket] = []
        for try await p in replay.inbound {
            handed.append(p)
            if handed.count == count { break }
        }
        return handed
    }

    static let independent = ReplayOptions(independentCommands: ReplayOptions.advertisingCommands)

    /// The host's silence is timed from its last expected packet: a host that answers at
    /// once and then goes quiet fails `timeout` later, not at the watchdog's second look
    /// (it looked once per `timeout` and failed only after a look that found no progress
    /// since the last, so this host failed two timeouts after its packet).
    @Test func aSilenceIsTimedFromTheHostsLastPacket() async throws {
        let host = TraceRecord.Direction.hostToController, controller = TraceRecord.Direction.controllerToHost
        let reset = HCIPacket.command(opcode: .reset, parameters: [])
        let version = HCIPacket.command(opcode: .readLocalVersionInformation, parameters: [])
        let replay = ReplayTransport(trace: Self.trace([(reset, host), (Self.complete(.reset), controller),
                                                        (version, host), (Self.complete(.readLocalVersionInformation), controller)]),
                                     options: ReplayOptions(timeout: .seconds(2)))
        // Taken before the packet goes: the replay's clock starts at or after it.
        let sent = ContinuousClock.now
        try replay.sendNow([reset])
        let m = await #expect(throws: ReplayMismatch.self) { try await replay.finished(within: .seconds(10)) }
        let silent = ContinuousClock.now - sent
        #expect(m?.expected == version && m?.silence == .seconds(2), "\(String(describing: m))")
        #expect(silent >= .seconds(2) && silent < .seconds(3), "failed \(silent) after the host's last packet")
    }

    /// Each `finished(within:)` caller has its own bound: one whose time runs out learns
    /// the packet due, another still waiting is not woken with it; one whose task is
    /// cancelled throws `CancellationError` at once; and once the host sends the rest,
    /// the caller left returns.
    @Test func eachFinishedCallerHasItsOwnTimeAndCancellation() async throws {
        let host = TraceRecord.Direction.hostToController, controller = TraceRecord.Direction.controllerToHost
        let reset = HCIPacket.command(opcode: .reset, parameters: [])
        let replay = ReplayTransport(trace: Self.trace([(reset, host), (Self.complete(.reset), controller)]),
                                     options: ReplayOptions(timeout: .seconds(60)))
        let patient = Task { try await replay.finished(within: .seconds(60)) }
        let cancelled = Task { try await replay.finished(within: .seconds(60)) }
        let hasty = await #expect(throws: ReplayMismatch.self) { try await replay.finished(within: .milliseconds(100)) }
        #expect(hasty?.expected == reset && hasty?.silence == .milliseconds(100), "\(String(describing: hasty))")
        cancelled.cancel()
        let ended = await firstElement(AsyncStream<String> { k in
            Task {
                do { try await cancelled.value; k.yield("returned") } catch is CancellationError { k.yield("cancelled") } catch { k.yield("\(error)") }
            }
        }, within: .seconds(5))
        #expect(ended == "cancelled")
        try replay.sendNow([reset])
        #expect(try await Self.handed(replay, 1) == [Self.complete(.reset)])
        #expect(await firstElement(AsyncStream<Bool> { k in Task { k.yield((try? await patient.value) != nil) } }, within: .seconds(5)) == true)
        #expect(!replay.isClosed)
        await replay.close()
        #expect(replay.isClosed)
    }

    @Test func anIndependentCommandMayGoAheadOfLinkDataOnly() async throws {
        let host = TraceRecord.Direction.hostToController, controller = TraceRecord.Direction.controllerToHost
        let completed = HCIEvent.numberOfCompletedPackets(NumberOfCompletedPackets(entries: [.init(connectionHandle: 0x41, numCompletedPackets: 1)])).packet
        let disconnected = HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: 0x41, reason: .remoteUserTerminatedConnection)).packet
        let scanResponse = LESetScanResponseData(data: []).packet, enable = LESetAdvertisingEnable(advertisingEnable: true).packet
        // A peripheral's recording: its advertising's next command went out only after
        // it had answered a request that arrived in between.
        func recording(_ between: HCIPacket, then command: any HCICommand = LESetAdvertisingEnable(advertisingEnable: true)) -> Trace {
            Self.trace([(scanResponse, host), (Self.complete(.leSetScanResponseData), controller),
                        (Self.acl([0x0A, 0x03, 0x00]), controller), (Self.acl([0x0B, 0x64]), host),
                        (between, controller), (command.packet, host), (Self.complete(type(of: command).opcode), controller)])
        }
        // The replayed host is quicker: its Enable goes before its answer to the request.
        let replay = ReplayTransport(trace: recording(completed), options: Self.independent)
        try replay.sendNow([scanResponse, enable, Self.acl([0x0B, 0x64])])
        // Each controller packet once, in the recorded order, none ahead of what it follows.
        let handed = try await Self.handed(replay, 4)
        #expect(handed == [Self.complete(.leSetScanResponseData), Self.acl([0x0A, 0x03, 0x00]), completed, Self.complete(.leSetAdvertisingEnable)])
        try await replay.finished(within: Duration.seconds(1))

        // Refused: without the option, in total order, ahead of an event other than
        // links' data (here a link's end), and a command not listed (a program's
        // disconnection follows the traffic it saw).
        var total = Self.independent
        total.ordering = .total
        let disconnect = Disconnect(connectionHandle: 0x41, reason: .remoteUserTerminatedConnection)
        for (trace, options, early) in [(recording(completed), ReplayOptions(), enable), (recording(completed), total, enable),
                                        (recording(disconnected), Self.independent, enable),
                                        (recording(completed, then: disconnect), Self.independent, disconnect.packet)] {
            let strict = ReplayTransport(trace: trace, options: options)
            try strict.sendNow([scanResponse])
            #expect(throws: ReplayMismatch.self, "\(options) \(early)") { try strict.sendNow([early]) }
        }
    }

    @Test func linkDataMayGoAheadOfAnIndependentCommandsAnswerOnly() async throws {
        let host = TraceRecord.Direction.hostToController, controller = TraceRecord.Direction.controllerToHost
        let scanResponse = LESetScanResponseData(data: []).packet, enable = LESetAdvertisingEnable(advertisingEnable: true).packet
        let subscribe = Self.acl([0x12, 0x11, 0x00, 0x01, 0x00]), subscribed = Self.acl([0x13]), notification = Self.acl([0x1B, 0x10, 0x00, 0x63])
        // A peripheral's recording: the program's notification went out after its
        // advertising's Enable was answered.
        func recording(_ answer: HCIPacket) -> Trace {
            Self.trace([(scanResponse, host), (Self.complete(.leSetScanResponseData), controller), (subscribe, controller),
                        (subscribed, host), (enable, host), (answer, controller), (notification, host)])
        }
        // The replayed program is quicker: its notification goes before the Enable.
        let replay = ReplayTransport(trace: recording(Self.complete(.leSetAdvertisingEnable)), options: Self.independent)
        try replay.sendNow([scanResponse, subscribed, notification, enable])
        let handed = try await Self.handed(replay, 3)
        #expect(handed == [Self.complete(.leSetScanResponseData), subscribe, Self.complete(.leSetAdvertisingEnable)])
        try await replay.finished(within: Duration.seconds(1))

        // Refused: without the option, in total order, ahead of an event that can be its
        // cause (here a link's end), and ahead of the answer to a command not listed.
        var total = Self.independent
        total.ordering = .total
        let ended = HCIEvent.disconnectionComplete(DisconnectionComplete(connectionHandle: 0x41, reason: .remoteUserTerminatedConnection)).packet
        let answered = recording(Self.complete(.leSetAdvertisingEnable))
        for (trace, options) in [(answered, ReplayOptions()), (answered, total), (recording(ended), Self.independent),
                                 (answered, ReplayOptions(independentCommands: [.leSetScanResponseData]))] {
            let strict = ReplayTransport(trace: trace, options: options)
            try strict.sendNow([scanResponse, subscribed])
            #expect(throws: ReplayMismatch.self, "\(options)") { try strict.sendNow([notification]) }
        }
    }

    @Test func addressesAreSubstituted() async throws {
        let (c, p) = try await Self.recordBatterySession()
        defer { unlink(c); unlink(p) }
        let recorded = BluetoothAddress("C0:00:00:00:0B:02")!, elsewhere = BluetoothAddress("C0:00:00:00:0B:99")!
        let replay = try ReplayTransport(contentsOf: c, options: ReplayOptions(addresses: [recorded: elsewhere]))
        let host = BluetoothHost(transport: replay, logger: Bench.logger)
        try await host.start()
        let found = try #require(try await host.central.first(matching: ScanFilter(names: ["Battery"]), within: .seconds(5)))
        #expect(found.address == elsewhere)
        await host.close()
    }

    @Test func theControllerSideOfACaptureFeedsAScanner() async throws {
        // A real capture (Rootcanal, one legacy report) and reports a phone's capture
        // carries: extended reports, one with an AD structure cut short.
        let rootcanal = try await CaptureFeed(contentsOf: Bench.root + "/Fixtures/rootcanal-scan.btsnoop")
        #expect(rootcanal.packets.count == 1)
        let host = BluetoothHost(transport: rootcanal, logger: Bench.logger)
        try await host.start()
        let results = try await host.central.scan()
        #expect(try await rootcanal.play() == 1)
        let seen = await collect(results, count: 1, within: .seconds(5))
        #expect(seen.map(\.name) == ["swift-ble"])
        await host.close()

        let phone = BluetoothAddress("5A:11:22:33:44:55")!, watch = BluetoothAddress("C4:00:00:00:00:07")!
        func extended(_ address: BluetoothAddress, _ data: [UInt8]) -> TraceRecord {
            let r = LEExtendedAdvertisingReport(reports: [.init(eventType: 0x0013, addressType: .random, address: address, rssi: -60, data: data)])
            return TraceRecord(timestampMicros: 0, packet: HCIEvent.le(.extendedAdvertisingReport(r)).packet, direction: .controllerToHost)
        }
        let capture = TraceEncoder(.pcapng(linkType: TraceFormat.linkTypeH4WithPHDR))
        var bytes = capture.header
        for r in [extended(phone, [0x06, 0x09] + Array("Pixel".utf8)),
                  // Complete Local Name claims 9 bytes, 4 follow: the name is damaged, the flags before it are not.
                  extended(watch, [0x02, 0x01, 0x06, 0x0A, 0x09] + Array("Watc".utf8))] {
            bytes += capture.record(r) ?? []
        }
        let feed = await CaptureFeed(trace: try TraceReader.read(bytes))
        let scanner = BluetoothHost(transport: feed, logger: Bench.logger)
        try await scanner.start()
        let scan = try await scanner.central.scan()
        #expect(try await feed.play() == 2)
        let both = await collect(scan, count: 2, within: .seconds(5))
        #expect(both.map(\.address) == [phone, watch])
        #expect(both.first?.name == "Pixel")
        #expect(both.last?.name == nil)
        #expect(both.last?.advertisement.data.flags != nil)
        #expect(await scanner.central.knownPeripherals.count == 2)
        await scanner.close()
    }

    /// Two Android phones' scans (Fixtures/android-scan.btsnoop: the advertising
    /// reports of their HCI snoop logs, addresses replaced): what a scanner recognises.
    @Test func aPhonesCaptureFeedsAScanner() async throws {
        let feed = try await CaptureFeed(contentsOf: Bench.root + "/Fixtures/android-scan.btsnoop")
        #expect(feed.packets.count == 408)
        let host = BluetoothHost(transport: feed, logger: Bench.logger)
        try await host.start()
        let results = try await host.central.scan(capacity: 1024)
        #expect(try await feed.play() == 408)
        let seen = await collect(results, count: 408, within: .seconds(10))
        #expect(seen.count == 408 && results.dropped.count == 0)
        let known = await host.central.knownPeripherals
        #expect(known.count == 14)
        #expect(Set(known.compactMap(\.name)) == ["SM-3BE4", "Highway controller", "RDL51822", "EL_B0PUmFAH"])
        // A 128-bit UUID in the advertisement, name and appearance in the scan response: one device.
        let highway = try #require(known.first { $0.name == "Highway controller" })
        #expect(highway.merged.serviceUUIDs == [BluetoothUUID("61444D74-538E-4EE0-B432-3D8B67775561")!])
        #expect(!highway.merged.serviceUUIDsComplete)
        #expect(highway.isConnectable && highway.reports == 24)
        // An iBeacon (Apple's manufacturer data, type 0x02 0x15).
        let beacons = known.compactMap { $0.merged.iBeacon }
        #expect(beacons == [IBeacon(uuid: BluetoothUUID("FDA50693-A4E2-4FB1-AFCF-C6EB07647825")!, major: 5, minor: 6, measuredPower: -80)])
        // ADV_NONCONN_IND from a non-resolvable random address; ADV_SCAN_IND: neither connectable.
        #expect(known.first { $0.address == BluetoothAddress("00:FE:ED:00:00:04")! }?.isConnectable == false)
        #expect(known.first { $0.address == BluetoothAddress("C0:FE:ED:00:00:02")! }?.isConnectable == false)
        // Company identifiers as the phones heard them: Apple, Microsoft, Samsung, LG, Imagination.
        let companies = Set(known.flatMap { $0.merged.manufacturerData.map(\.companyIdentifier) })
        #expect(companies == [0x004C, 0x0006, 0x0075, 0x00C4, 0x02F9])
        await host.close()
    }

    @Test func playingBeforeTheHostStartsSaysWhatToDo() async throws {
        let feed = await CaptureFeed(trace: Trace(format: .btsnoop(datalink: TraceFormat.btsnoopH4), records: [], damage: nil))
        await #expect(throws: BLETestingError.notStarted("CaptureFeed.play(): start the host first")) { try await feed.play() }
    }
}

/// Pairing replays too, when the program's random values are part of its inputs: a
/// host given `SecurityRandom.seeded` draws the same keys and nonces every run, so
/// its SMP PDUs, and the peer's recorded answers to them, match.
@Suite(.timeLimit(.minutes(3))) struct PairingReplayTests {
    /// The central's program: connect, read a characteristic that needs encryption
    /// (pairing on demand, Just Works, bonding), disconnect.
    static func central(_ host: BluetoothHost, peer: BluetoothAddress) async throws -> [UInt8] {
        let remote = try await host.central.connect(to: peer, within: .seconds(5))
        let value = try await remote.read(try await remote.characteristic(uuidB))
        #expect(await remote.security.bonded)
        _ = try await remote.disconnect()
        return value
    }

    @Test func aPairingOnDemandReplaysAgainstItsRecording() async throws {
        let radio = VirtualRadio()
        let path = ReplayKitTests.temporaryPath("pairing.btsnoop")
        defer { unlink(path) }
        let peer = BluetoothAddress("C0:00:00:00:0D:02")!
        let central = try BluetoothHost(transport: await radio.makeController(address: BluetoothAddress("C0:00:00:00:0D:01")!), recordingTo: path,
                                        logger: Bench.logger, security: SecurityOptions(random: .seeded(41)))
        let peripheral = BluetoothHost(transport: await radio.makeController(address: peer), logger: Bench.logger,
                                       security: SecurityOptions(random: .seeded(42)))
        try await central.start()
        try await peripheral.start()
        let secret = Characteristic(uuid: uuidB, properties: [.read], permissions: [.readEncrypted], value: [4, 2])
        try await peripheral.peripheral.add(Service(uuid: uuidA, characteristics: [secret]))
        try await peripheral.peripheral.startAdvertising(AdvertisingData())
        #expect(try await Self.central(central, peer: peer) == [4, 2])
        await central.close()
        await peripheral.close()
        let smp = try TraceReader.read(contentsOf: path).records.filter {
            if case let .acl(a)? = $0.packet { return a.data.count > 4 && a.data[2] == 0x06 && a.data[3] == 0 } else { return false }
        }
        #expect(smp.count >= 8, "the recording holds the pairing (\(smp.count) SMP PDUs)")
        for _ in 0..<5 {
            let replay = try ReplayTransport(contentsOf: path)
            let host = BluetoothHost(transport: replay, logger: Bench.logger, security: SecurityOptions(random: .seeded(41)))
            try await host.start()
            #expect(try await Self.central(host, peer: peer) == [4, 2])
            try await replay.finished(within: .seconds(5))
            await host.close()
        }
    }
}
