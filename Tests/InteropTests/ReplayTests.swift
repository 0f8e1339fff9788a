// Replays a session recorded from Rootcanal with `btctl gatt read --name btctl-battery
// --uuid 2A19 --btsnoop Fixtures/rootcanal-gatt-read.btsnoop` (against `btctl gatt
// serve docs/examples/battery.json`): the replay plays the recorded controller, and the
// same facade calls btctl makes must send exactly the host frames recorded, byte for
// byte — initialisation, scan by name, connection, MTU exchange, full discovery, the
// read and the disconnection.

import BLE
import BLETesting
import Foundation
import HCI
import Snoop
import Transports
import Testing

struct ReplayTests {
    static let fixture = Interop.root + "/Fixtures/rootcanal-gatt-read.btsnoop"

    /// The recording played up to the connection: host started, btctl-battery found by
    /// name and connected (MTU exchanged), as `btctl gatt read --name` does.
    static func connected() async throws -> (ReplayTransport, BluetoothHost, RemotePeripheral) {
        // Generous bounds: they only stop a broken test, and with the whole suite sharing
        // two cores (Rootcanal, Bumble and btctl processes starting) a step can wait
        // seconds for a thread; the recording, not the timing, is under test.
        let replay = try ReplayTransport(contentsOf: fixture, options: ReplayOptions(timeout: .seconds(30)))
        let host = BluetoothHost(transport: replay, logger: Interop.logger, commandTimeout: .seconds(30))
        try await host.start()
        let found = try #require(try await host.central.first(matching: ScanFilter(names: ["btctl-battery"]), within: .seconds(15)))
        return (replay, host, try await host.central.connect(to: found, within: .seconds(15)))
    }

    @Test func gattReadSessionReplaysExactly() async throws {
        let (replay, host, peripheral) = try await Self.connected()
        let level = try await peripheral.characteristic(BluetoothUUID(0x2A19))
        #expect(try await peripheral.read(handle: level.valueHandle) == [0x64])
        // The initiator's controller reports the end as its own host's (Vol 4, Part E, §7.1.6).
        #expect(try await peripheral.disconnect() == .connectionTerminatedByLocalHost)
        await host.close()
        // Every recorded frame was played, and the stack sent nothing the recording lacks.
        try await replay.finished(within: .seconds(5))
    }

    @Test func aReplayThatSkipsTheDiscoveryFailsAtTheFirstFrameItChanges() async throws {
        let (replay, host, peripheral) = try await Self.connected()
        // btctl discovered first; a read by handle goes straight to the Read Request.
        await #expect(throws: (any Error).self) { _ = try await peripheral.read(handle: 0x0010) }
        let mismatch = try #require(replay.mismatch)
        #expect(mismatch.expectedDecoded?.contains("Read By Group Type Request") == true, "\(mismatch)")
        #expect(mismatch.actualDecoded?.contains("Read Request") == true, "\(mismatch)")
        await host.close()
    }
}

/// `btctl trace replay`: the same recording served over H4 to `btctl gatt read` as a
/// separate process, which cannot tell it from Rootcanal; what a host that leaves the
/// recording is told; and a server's session with Bumble replayed to `btctl gatt serve`.
@Suite(.serialized, .liveTimeLimit) struct BtctlReplayTests {
    /// Starts the replay of the fixture; returns it and the port it listens on.
    static func serve(fixture: String = ReplayTests.fixture, _ extra: [String] = [], frames: (host: Int, controller: Int) = (30, 49)) async throws -> (LiveProcess, UInt16) {
        let replay = try LiveProcess(BtctlGATTTests.btctl, ["trace", "replay", fixture, "--listen", "127.0.0.1:0", "--json"] + extra, mergeStderr: true)
        #expect(await replay.waitForOutput { $0.contains("\"event\":\"listening\"") }, "\(replay.output)")
        let line = try #require(replay.output.split(separator: "\n").first { $0.contains("\"event\":\"listening\"") })
        let o = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(o["host_frames"] as? Int == frames.host && o["controller_frames"] as? Int == frames.controller, "\(o)")
        let port = try #require((o["address"] as? String)?.split(separator: ":").last.flatMap { UInt16($0) })
        return (replay, port)
    }

    /// The replay's closing event, after it exits.
    static func end(of replay: LiveProcess) async throws -> (status: Int32, event: [String: Any]) {
        let status = await replay.exit(timeout: 30)
        _ = try JSONSchemaTests.check(replay.output.split(separator: "\n").filter { $0.hasPrefix("{") }.joined(separator: "\n"), against: "trace-replay")
        let line = try #require(replay.output.split(separator: "\n").last { $0.contains("\"event\":\"matched\"") || $0.contains("\"event\":\"mismatch\"") },
                                "\(replay.output)")
        return (status, try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]))
    }

    @Test func btctlReadsTheRecordingOverH4() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let (replay, port) = try await Self.serve()
        let read = try await BtctlGATTTests.run(["gatt", "read", "--name", "btctl-battery", "--uuid", "2A19", "-t", "tcp:127.0.0.1:\(port)"])
        #expect(read.status == 0 && read.out.contains("0x0010: 64  100 %"), "\(read.out)")
        let (status, event) = try await Self.end(of: replay)
        #expect(status == 0 && event["event"] as? String == "matched" && event["host_frames"] as? Int == 30, "\(replay.output)")
    }

    @Test func aHostThatSkipsTheDiscoveryIsToldWhere() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let (replay, port) = try await Self.serve()
        let read = try await BtctlGATTTests.run(["gatt", "read", "--name", "btctl-battery", "--handle", "0x10", "-t", "tcp:127.0.0.1:\(port)"])
        #expect(read.status == 1, "\(read.out)")
        let (status, event) = try await Self.end(of: replay)
        #expect(status == 1)
        #expect(event["frame"] as? Int == 46, "\(event)")
        #expect((event["expected"] as? String)?.contains("Read By Group Type Request") == true, "\(event)")
        #expect((event["actual"] as? String)?.contains("Read Request handle=0x0010") == true, "\(event)")
        #expect(event["actual_h4"] as? String == "02fe0e0700030004000a1000")
        #expect(replay.output.contains("Error: replay mismatch at frame 46"), "the reason on standard error too")
    }

    /// A host that sends the recorded Reset, then stops: after --timeout the replay names
    /// the command due; one that closes the connection instead is told so at once.
    @Test func aHostThatStopsOrClosesEarly() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        for closes in [false, true] {
            // The host that closes does so long before its timeout: on a loaded machine
            // (the whole suite at once) 0.5 s of silence could pass first.
            let (replay, port) = try await Self.serve(["--timeout", closes ? "10" : "0.5"])
            let host = try TransportSpec(parsing: "tcp:127.0.0.1:\(port)").open(logger: Interop.logger)
            try await host.send(.command(opcode: .reset, parameters: []))
            var answers = host.inbound.makeAsyncIterator()
            let complete = try await answers.next()
            #expect(complete == (try HCIPacket(h4: [0x04, 0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00])), "the recorded Command Complete for Reset")
            if closes { await host.close() }
            let (status, event) = try await Self.end(of: replay)
            if !closes { await host.close() }
            #expect(status == 1)
            #expect(event["frame"] as? Int == 3 && (event["expected"] as? String)?.contains("Read Local Version Information") == true, "\(event)")
            #expect(event["actual"] == nil)
            if closes {
                #expect(event["host_closed"] as? Bool == true, "\(event)")
            } else {
                #expect(event["silence_ms"] as? Int == 500, "\(event)")
            }
        }
    }

    /// `--ignore`: a command left out of the check. With Read Local Version Information
    /// ignored, a host silent after Reset is told the next command is due; a name that
    /// is no command is refused before anything listens.
    @Test func ignoredCommandsAreNotChecked() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let (replay, port) = try await Self.serve(["--timeout", "0.5", "--ignore", "read local version information"])
        let host = try TransportSpec(parsing: "tcp:127.0.0.1:\(port)").open(logger: Interop.logger)
        try await host.send(.command(opcode: .reset, parameters: []))
        var answers = host.inbound.makeAsyncIterator()
        _ = try await answers.next()
        let (status, event) = try await Self.end(of: replay)
        await host.close()
        #expect(status == 1 && event["frame"] as? Int == 5, "\(event)")
        #expect((event["expected"] as? String)?.contains("Read Local Supported Commands") == true, "\(event)")
        let bad = try await BtctlGATTTests.run(["trace", "replay", ReplayTests.fixture, "--ignore", "LE Frobnicate"])
        #expect(bad.status == 64 && bad.out.contains("--ignore takes a command's name"), "\(bad.out)")
    }

    /// The server's side: `btctl gatt serve` recorded while Bumble, as central, connected,
    /// discovered, read, wrote and disconnected. A fresh `btctl gatt serve` on the replay
    /// hears the same Bumble and sends the same conversation, byte for byte, through to
    /// the advertising it stops at the end of its 6 s; it reports the same events.
    @Test func btctlServeAnswersTheRecordedBumbleCentral() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let (replay, port) = try await Self.serve(fixture: Interop.root + "/Fixtures/rootcanal-gatt-serve.btsnoop", ["--timeout", "15"], frames: (52, 80))
        // Standard input at its end from the start, as in the recording (< /dev/null).
        let serve = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", "tcp:127.0.0.1:\(port)",
                                                           "--duration", "6", "--json"])
        serve.closeInput()
        #expect(await serve.exit(timeout: 30) == 0, "\(serve.output)")
        let events = BtctlServeTests.events(serve.output)
        #expect(events.contains { $0["event"] as? String == "connected" && $0["peer"] as? String == "F0:F1:F2:F3:F4:F5" }, "\(serve.output)")
        #expect(events.contains { $0["event"] as? String == "written" && $0["handle"] as? Int == 21 && $0["value"] as? String == Array("from-bumble".utf8).hexString })
        #expect(events.contains { $0["event"] as? String == "disconnected" })
        let (status, event) = try await Self.end(of: replay)
        #expect(status == 0 && event["event"] as? String == "matched" && event["host_frames"] as? Int == 52, "\(replay.output)")
    }

    /// A Linux monitor trace with two controllers (as btmon records the guest's hci0 and
    /// hci1): without --index the replay refuses and names them; with --index 1 only
    /// that controller's conversation is played (Reset, its Command Complete).
    @Test func aMonitorTraceReplaysOneController() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let file = BtctlCLITests.temporary("two-controllers.btsnoop")
        let writer = try TraceFileWriter(path: file, output: .btsnoop(datalink: TraceFormat.btsnoopMonitor))
        let reset = HCIPacket.command(opcode: .reset, parameters: [])
        let complete = try HCIPacket(h4: [0x04, 0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00])
        for (index, p, d) in [(UInt16(0), reset, TraceRecord.Direction.hostToController), (1, reset, .hostToController),
                              (0, complete, .controllerToHost), (1, complete, .controllerToHost),
                              (0, .command(opcode: .readLocalVersionInformation, parameters: []), .hostToController)] {
            #expect(writer.write(TraceRecord(timestampMicros: 0, direction: d, content: .packet(p), adapterIndex: index)))
        }
        writer.close()
        let both = try await BtctlGATTTests.run(["trace", "replay", file])
        #expect(both.status == 1 && both.out.contains("holds the packets of controllers 0, 1: choose one with --index"), "\(both.out)")
        let missing = try await BtctlGATTTests.run(["trace", "replay", file, "--index", "5"])
        #expect(missing.status == 1 && missing.out.contains("no packet of controller 5; it has 0, 1"), "\(missing.out)")

        let (replay, port) = try await Self.serve(fixture: file, ["--index", "1"], frames: (1, 1))
        let host = try TransportSpec(parsing: "tcp:127.0.0.1:\(port)").open(logger: Interop.logger)
        try await host.send(reset)
        var answers = host.inbound.makeAsyncIterator()
        #expect(try await answers.next() == complete)
        await host.close()
        let (status, event) = try await Self.end(of: replay)
        #expect(status == 0 && event["event"] as? String == "matched", "\(replay.output)")
    }

    /// A pairing replays when its random values are inputs: `btctl pair --random-seed`
    /// recorded on the virtual radio, then replayed to `btctl pair` with the same seed
    /// and a fresh bond file, matches every frame; another seed leaves the recording at
    /// our first SMP PDU that draws on them, the Pairing Public Key.
    @Test func aSeededPairingReplays() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let trace = BtctlCLITests.temporary("pair-seeded.btsnoop")
        let bonds = (0..<3).map { BtctlCLITests.temporary("pair-bonds-\($0).json") }
        let recorded = try await BtctlGATTTests.run(["pair", "--name", "FireAlarm-B3", "-t", "virtual", "--random-seed", "7", "--yes",
                                                     "--bonds", bonds[0], "--btsnoop", trace])
        #expect(recorded.status == 0 && recorded.out.contains("paired with"), "\(recorded.out)")
        let frames = try TraceReader.read(contentsOf: trace).records.reduce(into: (host: 0, controller: 0)) {
            if $1.direction == .hostToController { $0.host += 1 } else { $0.controller += 1 }
        }
        for (seed, bondFile) in [("7", bonds[1]), ("8", bonds[2])] {
            let (replay, port) = try await Self.serve(fixture: trace, frames: frames)
            let pair = try await BtctlGATTTests.run(["pair", "--name", "FireAlarm-B3", "-t", "tcp:127.0.0.1:\(port)", "--random-seed", seed, "--yes",
                                                     "--bonds", bondFile])
            let (status, event) = try await Self.end(of: replay)
            if seed == "7" {
                #expect(pair.status == 0 && status == 0 && event["event"] as? String == "matched", "\(pair.out) \(replay.output)")
            } else {
                #expect(pair.status != 0 && status == 1, "\(pair.out) \(replay.output)")
                #expect((event["expected"] as? String)?.contains("Pairing Public Key") == true, "\(event)")
            }
        }
    }
}
