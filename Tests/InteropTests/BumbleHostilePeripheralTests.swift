// `btctl gatt discover`, `btctl gatt write` and `btctl pair` against Bumble as a hostile
// GATT server, on Rootcanal:
// bumble_hostile_peripheral.py takes Bumble's ATT layer off the link and answers our
// requests by hand, each connection lying in one way (a declaration at handle 0, handles
// that go backwards, a Find Information answer that never moves on, a wrong opcode, a
// response longer than ATT_MTU, entries of an undefined length, an Error Response for
// another request, an include of a backwards range, an include answer that never moves
// on; for a long write, a Prepare Write Response that does not echo its
// request, and Prepare Queue Full on the second piece; for pairing, a Pairing Response
// with a 6-octet key, one octet short, or asking for keys not offered, and a refusal).
// btctl must end with the typed error naming the lie, exit non-zero, ask only a few
// requests, cancel a long write the server broke, and fail a pairing with the reason
// the spec gives: never a crash, never a loop (issue 9, items 3 and 4). Then our facade
// central answers the LE signaling commands a peripheral sends, valid and not.

import BLE
import BLETesting
import Foundation
import Testing
import Transports

@Suite(.serialized, .liveTimeLimit) struct BumbleHostilePeripheralTests {
    static let discover = ["gatt", "discover"]
    /// 40 octets at ATT_MTU 23: three Prepare Write Requests of 18, 18 and 4.
    static let longWrite = ["gatt", "write", "--handle", "3", "--text", String(repeating: "w", count: 40)]
    static let pair = ["pair", "--yes", "--no-bond"]
    /// Each mode, the btctl command run against it, and what btctl's error must say.
    static let cases: [(mode: String, command: [String], named: String)] = [
        ("zero-handle", discover, "discovery failed: the server's Read By Type Response lists handle 0x0000 outside the range asked for (0x0001–0x0005)"),
        ("not-increasing", discover, "discovery failed: the server's Read By Type Response lists handle 0x0002 after 0x0003; handles must increase"),
        ("find-info-repeat", discover, "discovery failed: the server's Find Information Response lists handle 0x0004 outside the range asked for (0x0005–0x0005)"),
        ("wrong-opcode", discover, "discovery failed: the peer answered Read By Group Type Request with Read Response"),
        ("oversized", discover, "discovery failed: the server's Read By Group Type Response is 26 bytes; ATT_MTU is 23"),
        ("entry-length", discover, "discovery failed: the server's Read By Group Type Response entry at 0x0001 is malformed"),
        ("error-for-another", discover, "discovery failed: the peer answered Read By Group Type Request with Error Response for Read Request"),
        ("include-backwards", discover, "discovery failed: the server's Read By Type Response entry at 0x0005 is malformed: included range 0x0005–0x0001"),
        ("include-repeat", discover, "discovery failed: the server's Read By Type Response lists handle 0x0005 outside the range asked for (0x0006–0xffff)"),
        ("prepare-echo-changed", longWrite, "the server's Prepare Write Response for 0x0003 did not echo the request; the write was cancelled"),
        ("prepare-queue-full", longWrite, "write failed: peer refused (handle 0x0003): Prepare Queue Full (0x09)"),
        ("smp-key-size-6", pair, "failed: pairing failed here: encryption key size"),
        ("smp-short-response", pair, "failed: pairing failed here: invalid parameters"),
        ("smp-extra-keys", pair, "failed: pairing failed here: invalid parameters"),
        ("smp-refused", pair, "failed: peer failed pairing: pairing not supported"),
    ]
    /// What our central says on SMP after its Pairing Request, by mode: the Pairing
    /// Failed its reason names (Part H §3.5.5), and nothing to the peer's own.
    static let pairingFailed = ["smp-key-size-6": ["0506"], "smp-short-response": ["050a"], "smp-extra-keys": ["050a"], "smp-refused": []]

    @Test func btctlEndsWithTheLieNamed() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_hostile_peripheral.py", String(rc.hciPort)]
                                     + Self.cases.map(\.mode))
        #expect(await bumble.waitForOutput { $0.contains("\"advertising\"") })
        for (mode, command, named) in Self.cases {
            // Within btctl's 5 s command timeout: a lie must end the procedure, not a timeout.
            let started = ContinuousClock.now
            let run = try await BtctlGATTTests.run(command + ["F1:F2:F3:F4:F5:F7/random", "-t", rc.transportSpec])
            #expect(run.status == 1, "\(mode): \(run.out)")
            #expect(run.out.contains(named), "\(mode): \(run.out)")
            #expect(ContinuousClock.now - started < .seconds(15), "\(mode)")
            #expect(await bumble.waitForOutput(within: .seconds(10)) { $0.contains("\"disconnected\", \"mode\": \"\(mode)\"") }, "\(mode)")
        }
        #expect(await bumble.waitForOutput(within: .seconds(10)) { $0.contains("\"done\"") })
        _ = await bumble.stop()
        let lines = bumble.output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let ended = Dictionary(lines.filter { $0["event"] as? String == "disconnected" }.compactMap { l -> (String, Int)? in
            guard let m = l["mode"] as? String, let n = l["requests"] as? Int else { return nil }
            return (m, n)
        }, uniquingKeysWith: { a, _ in a })
        // A handful of requests each (Exchange MTU, then discovery up to the lie): no loop.
        // The include lies come after the whole discovery (7 requests), in the 8th and 9th.
        for c in Self.cases { #expect((1...9).contains(ended[c.mode] ?? 0), "\(c.mode): \(ended)") }
        #expect(ended["include-backwards"] == 8 && ended["include-repeat"] == 9, "\(ended)")
        for (mode, answer) in Self.pairingFailed {
            let sent = lines.filter { $0["event"] as? String == "smp" && $0["mode"] as? String == mode }.compactMap { $0["pdu"] as? String }
            #expect(sent.first?.hasPrefix("01") == true && Array(sent.dropFirst()) == answer, "\(mode): \(sent)")
        }
        // A long write the server broke is cancelled (§4.9.4; Execute Write, flags 0x00),
        // and nothing is executed.
        for mode in ["prepare-echo-changed", "prepare-queue-full"] {
            let sent = lines.filter { $0["event"] as? String == "request" && $0["mode"] as? String == mode }.compactMap { $0["pdu"] as? String }
            #expect(sent.last == "1800" && !sent.contains("1801"), "\(mode): \(sent)")
        }
    }

    /// `Central.connect` gets its link whatever the MTU exchange gets, as CoreBluetooth
    /// and BlueZ do; only the link's end fails it. A server that refuses the exchange
    /// with Request Not Supported leaves ATT_MTU at 23 (Vol 3 Part G §4.3.1, "the
    /// default MTU shall be used") and serves GATT; before, connect threw the Error
    /// Response. A server that never answers (ATT silent, the kernel without
    /// bluetoothd) gets its link once what is left of connect's limit has passed; before,
    /// connect waited for the 30 s transaction timeout and failed. That link pairs at
    /// once, and a GATT operation waiting behind the unanswered exchange ends with the
    /// link's end when we disconnect, not with a hang.
    @Test func ourCentralConnectsWhateverTheMTUExchangeGets() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_hostile_peripheral.py", String(rc.hciPort),
                                              "mtu-not-supported", "att-silent"])
        #expect(await bumble.waitForOutput { $0.contains("\"advertising\"") })
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        try await host.start()
        let address = BluetoothAddress("F1:F2:F3:F4:F5:F7")!

        let refused = try #require(await host.central.first(matching: ScanFilter(addresses: [address]), within: .seconds(20)))
        let p = try await host.central.connect(to: refused, within: .seconds(10))
        #expect(await p.mtu == 23)
        let services = try await p.discoverServices()
        #expect(services.map(\.uuid) == [BluetoothUUID(0x180F)])
        #expect(services.first?.characteristics.map(\.valueHandle) == [3])
        _ = try await p.disconnect()
        #expect(await bumble.waitForOutput(within: .seconds(10)) { $0.contains("\"disconnected\", \"mode\": \"mtu-not-supported\"") })

        let silent = try #require(await host.central.first(matching: ScanFilter(addresses: [address]), within: .seconds(20)))
        let started = ContinuousClock.now
        let q = try await host.central.connect(to: silent, within: .seconds(4))
        let took = ContinuousClock.now - started
        #expect(took < .seconds(8), "\(took)")
        #expect(await q.mtu == 23)
        #expect(try await q.secure(level: .encrypted).encrypted)
        let discovery = Task { try await q.discoverServices() }
        // The discovery waits behind the exchange nobody answers (the client tells).
        #expect(await firstElement(q.client.mtuWaiterCounts().filter { $0 > 0 }, within: .seconds(5)) == 1)
        _ = try await q.disconnect()
        let ended = await firstElement(AsyncStream<String> { k in
            Task {
                do { _ = try await discovery.value; k.yield("returned") } catch BLEError.disconnected { k.yield("disconnected") } catch { k.yield("\(error)") }
            }
        }, within: .seconds(5))
        #expect(ended == "disconnected")
        #expect(await bumble.waitForOutput(within: .seconds(10)) { $0.contains("\"done\"") })
        await host.close()
        _ = await bumble.stop()
        // The silent server was asked one thing: Exchange MTU. The discovery waited behind it.
        #expect(bumble.output.contains("\"disconnected\", \"mode\": \"att-silent\", \"requests\": 1"), "\(bumble.output)")
    }

    /// `btctl gatt discover --att-mtu 100` against a server that refuses Exchange MTU
    /// (Request Not Supported): btctl offers 100 (`02 6400`), takes the default MTU
    /// (Vol 3 Part G §4.3.1), lists the database and exits 0. Before, it failed on
    /// the refusal.
    @Test func btctlDiscoversAServerThatRefusesTheMTUExchange() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_hostile_peripheral.py", String(rc.hciPort), "mtu-not-supported"])
        #expect(await bumble.waitForOutput { $0.contains("\"advertising\"") })
        let run = try await JSONSchemaTests.run(["gatt", "discover", "--att-mtu", "100", "F1:F2:F3:F4:F5:F7/random", "-t", rc.transportSpec, "--json"])
        #expect(run.status == 0, "\(run.out)")
        let lines = try JSONSchemaTests.check(run.out, against: "gatt-discover")
        #expect(lines.contains { $0["event"] as? String == "service" && $0["uuid"] as? String == "180F" }, "\(run.out)")
        #expect(lines.contains { $0["event"] as? String == "descriptor" && $0["uuid"] as? String == "2902" }, "\(run.out)")
        #expect(await bumble.waitForOutput(within: .seconds(10)) { $0.contains("\"done\"") })
        _ = await bumble.stop()
        let requests = bumble.output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .filter { $0["event"] as? String == "request" }.compactMap { $0["pdu"] as? String }
        #expect(requests.first == "026400", "\(requests)")
    }

    /// Our central (the facade) against the LE signaling a peripheral may send it, and
    /// some it may not (Part A §4.20, §4.1): a valid Connection Parameter Update Request
    /// is accepted and the controller applies it (Bumble sees the new parameters); one
    /// that breaks §4.20's rules is rejected (result 0x0001); a short one, an unknown
    /// code and a Disconnection Request for a CID we do not have get Command Reject.
    @Test func ourCentralAnswersAPeripheralsSignaling() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_hostile_peripheral.py", String(rc.hciPort), "signaling"])
        #expect(await bumble.waitForOutput { $0.contains("\"advertising\"") })
        let host = try BluetoothHost.open(rc.transportSpec, logger: Interop.logger)
        try await host.start()
        let address = BluetoothAddress("F1:F2:F3:F4:F5:F7")!
        let found = try #require(await host.central.first(matching: ScanFilter(addresses: [address]), within: .seconds(20)))
        let p = try await host.central.connect(to: found, within: .seconds(10))
        #expect(await bumble.waitForOutput(within: .seconds(30)) { $0.contains("signaling-done") })
        _ = try? await p.disconnect()
        await host.close()
        _ = await bumble.stop()
        let lines = bumble.output.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        var got: [String: String] = [:]
        for l in lines where l["event"] as? String == "signaling" {
            if let name = l["name"] as? String { got[name] = l["got"] as? String ?? "none" }
        }
        let expected: KeyValuePairs<String, String> = [
            // Connection Parameter Update Response 13 <id> 02 00 <result>: 0 accepted, 1 rejected.
            "parameter update": "133102000000",
            "parameter update, minimum above maximum": "133202000100",
            "parameter update, timeout too short": "133302000100",
            "parameter update, interval below 7.5 ms": "133402000100",
            // Command Reject 01 <id> <length> <reason> [data]: 0 not understood, 2 invalid CID.
            "parameter update one octet short": "013502000000",
            "unknown signaling code": "013602000000",
            "disconnection request for an unknown CID": "0137060002004000" + "4100",
        ]
        #expect(got.count == expected.count, "\(bumble.output)")
        for (name, answer) in expected { #expect(got[name] == answer, "\(name)") }
        // The accepted update reached the controller: Bumble's link now has 30-45 ms,
        // latency 0 and the 4.2 s supervision timeout asked for (no other update asks 4.2 s).
        let applied = lines.filter { $0["event"] as? String == "parameters" }
        #expect(applied.count == 1, "\(bumble.output)")
        let interval = applied.first?["interval_ms"] as? Double ?? 0
        #expect((30...45).contains(interval) && applied.first?["latency"] as? Int == 0 && applied.first?["timeout_ms"] as? Double == 4200, "\(bumble.output)")
    }
}
