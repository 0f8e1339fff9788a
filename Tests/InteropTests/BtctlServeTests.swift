// `btctl gatt serve` as a developer prototypes with it, against Bumble (Google's
// Python host) on Rootcanal: Bumble finds the server by name with an active scan and
// reads the primary service UUIDs from its advertisement; once Bumble has subscribed,
// values typed on btctl's standard input reach it as a notification and an indication,
// and btctl reports each as a JSON event. Also: the strict JSON reader's line and
// column for syntax and schema errors.

import BLETesting
import Foundation
import Testing

@Suite(.serialized, .liveTimeLimit) struct BtctlServeTests {
    static func events(_ text: String) -> [[String: Any]] {
        text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    @Test func bumbleSeesTheAdvertisedServicesAndTheValuesTypedOnStdin() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let server = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", rc.transportSpec, "--json"])
        #expect(await server.waitForOutput { $0.contains("\"event\":\"advertising\"") }, "\(server.output)")

        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_gatt_central.py", String(rc.hciPort), "name:btctl-battery"])
        // Bumble subscribes to Battery Level (notify; value handle 16 in battery.json's
        // layout) and the UART TX characteristic (indicate; 23), after Service Changed (8).
        let subscribed = await server.waitForOutput(within: .seconds(45)) { out in
            Set(Self.events(out).filter { $0["event"] as? String == "subscription" }.compactMap { $0["handle"] as? Int }).isSuperset(of: [16, 23])
        }
        #expect(subscribed, "\(server.output)\n\(bumble.output)")
        server.send("notify 2A19 4b")
        server.send("indicate 6E400003-B5A3-F393-E0A9-E50E24DCCA9E \"fire\"")
        server.send("notify 2A00")  // not a notifying characteristic: an error event, serving goes on
        #expect(await bumble.waitForOutput { $0.contains("\"event\": \"done\"") }, "\(bumble.output)")
        #expect(await server.waitForOutput { $0.contains("\"event\":\"disconnected\"") }, "\(server.output)")
        server.send("quit")  // ends serving as --duration would: exit status 0
        #expect(await server.exit(timeout: 20) == 0)
        _ = await bumble.stop()

        let b = Self.events(bumble.output)
        let ad = try #require(b.first { $0["event"] as? String == "advertisement" }, "\(b)")
        let uuids = (ad["uuids"] as? [String] ?? []).map { $0.uppercased() }
        #expect(uuids.contains { $0.contains("180F") } && uuids.contains("6E400001-B5A3-F393-E0A9-E50E24DCCA9E"), "\(ad)")
        #expect(ad["connectable"] as? Bool == true)
        let values = b.filter { $0["event"] as? String == "value" }
        #expect(values.contains { ($0["uuid"] as? String)?.contains("2A19") == true && $0["value"] as? String == "4b" }, "\(b)")
        #expect(values.contains { ($0["uuid"] as? String)?.uppercased() == "6E400003-B5A3-F393-E0A9-E50E24DCCA9E" && $0["value"] as? String == Array("fire".utf8).hexString }, "\(b)")

        let s = try JSONSchemaTests.check(server.output, against: "gatt-serve")
        let notified = try #require(s.first { $0["event"] as? String == "notified" }, "\(s)")
        #expect(notified["uuid"] as? String == "2A19" && notified["formatted"] as? String == "75 %" && (notified["connections"] as? [Int])?.count == 1)
        let indicated = try #require(s.first { $0["event"] as? String == "indicated" }, "\(s)")
        #expect(indicated["text"] as? String == "fire" && (indicated["confirmed"] as? [Int])?.count == 1, "\(indicated)")
        let error = try #require(s.first { $0["event"] as? String == "error" }, "\(s)")
        #expect((error["message"] as? String)?.contains("cannot notify") == true, "\(error)")
        // Bumble leaves without writing its CCCDs off: each subscription is reported
        // ended with the link (as CoreBluetooth's didUnsubscribeFrom), after it began.
        for handle in [16, 23] {
            let changes = s.filter { $0["event"] as? String == "subscription" && $0["handle"] as? Int == handle }
            #expect(changes.count == 2 && changes.last?["notify"] as? Bool == false && changes.last?["indicate"] as? Bool == false, "\(changes)")
        }
        // The closing summary counts what was reported above.
        let summary = try #require(s.last, "\(s)")
        #expect(summary["event"] as? String == "summary" && summary["connections"] as? Int == 1 && summary["pairings"] as? Int == 0 && summary["notified"] as? Int == 1
                    && summary["indicated"] as? Int == 1 && summary["errors"] as? Int == 1
                    && summary["subscriptions"] as? Int == s.filter { $0["event"] as? String == "subscription" }.count, "\(summary)")
    }

    /// Without --json a console command that fails is said on standard error and
    /// counted in the closing summary, as with --json.
    @Test func aConsoleErrorIsCountedWithoutJSONToo() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let server = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", "virtual"], mergeStderr: true)
        #expect(await server.waitForOutput { $0.contains("type 'help' for commands") }, "\(server.output)")
        server.send("notify 2A00")  // not a notifying characteristic
        server.send("quit")
        #expect(await server.exit(timeout: 20) == 0)
        #expect(server.output.contains("btctl: ") && server.output.contains("cannot notify"), "\(server.output)")
        #expect(server.output.contains("sent, 1 console error\n"), "\(server.output)")
    }

    /// Commands typed ahead, more than the console keeps waiting (`ConsoleCommands`),
    /// all run, in the order typed, and `quit` after them ends serving.
    @Test func commandsTypedAheadRunInOrder() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let server = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", "virtual", "--json"])
        #expect(await server.waitForOutput { $0.contains("\"event\":\"advertising\"") }, "\(server.output)")
        server.send((0..<40).map { String(format: "set 2A19 %02x", $0) }.joined(separator: "\n") + "\nquit")
        #expect(await server.exit(timeout: 20) == 0, "\(server.output)")
        let values = Self.events(server.output).filter { $0["event"] as? String == "set" }.compactMap { $0["value"] as? String }
        #expect(values == (0..<40).map { String(format: "%02x", $0) }, "\(server.output)")
    }

    /// `--preferred-connection-parameters`: Bumble's client reads them from our GAP
    /// service (Peripheral Preferred Connection Parameters, four little-endian fields);
    /// values outside §12.3's ranges are a usage error.
    @Test func bumbleReadsThePreferredConnectionParameters() async throws {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python() else { return }
        guard BtctlGATTTests.isBuilt() else { return }
        let path = Interop.root + "/docs/examples/battery.json"
        let bad = try await BtctlCLITests.run(["gatt", "serve", path, "-t", "virtual", "--preferred-connection-parameters", "40:24:0:none"])
        #expect(bad.status == 64 && bad.out.contains("MIN at most MAX"), "\(bad.out)")
        let alone = try await BtctlCLITests.run(["gatt", "serve", path, "-t", "virtual", "--request-preferred-parameters"])
        #expect(alone.status == 64 && alone.out.contains("needs --preferred-connection-parameters"), "\(alone.out)")
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let server = try LiveProcess(BtctlGATTTests.btctl, ["gatt", "serve", path, "-t", rc.transportSpec, "--json",
                                                            "--preferred-connection-parameters", "24:40:0:none"])
        #expect(await server.waitForOutput { $0.contains("\"event\":\"advertising\"") }, "\(server.output)")
        let bumble = try await Interop.execute(python, [Interop.root + "/Tests/InteropTests/bumble_gatt_central.py", String(rc.hciPort),
                                                        "name:btctl-battery", "--no-subscribe"], timeout: 60)
        server.send("quit")
        #expect(await server.exit(timeout: 20) == 0)
        let reads = Self.events(bumble.out).filter { $0["event"] as? String == "read" }
        let ppcp = reads.first { ($0["uuid"] as? String)?.uppercased().contains("2A04") == true }
        #expect(ppcp?["value"] as? String == "180028000000ffff", "\(bumble.out)")
    }

    /// `--no-service-uuids` advertises the name alone (the flag's name is spelled as the
    /// docs spell it, not as the argument parser would split `noServiceUUIDs`).
    @Test func noServiceUUIDsAdvertisesTheNameAlone() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let path = Interop.root + "/docs/examples/battery.json"
        for (flags, services) in [([], ["180F", "6E400001-B5A3-F393-E0A9-E50E24DCCA9E"]), (["--no-service-uuids"], [])] {
            let r = try await BtctlCLITests.run(["gatt", "serve", path, "-t", "virtual", "--json", "--duration", "0.3"] + flags)
            #expect(r.status == 0, "\(r.out)")
            let adv = try #require(Self.events(r.out).first { $0["event"] as? String == "advertising" }, "\(r.out)")
            #expect((adv["services"] as? [String])?.map { $0.uppercased() } == services, "\(adv)")
        }
    }

    /// Syntax errors (strict JSON: no trailing comma, no repeated key) and schema errors
    /// name the file, line and column, the way a compiler does.
    @Test func errorsInTheDatabaseFileNameLineAndColumn() async throws {
        guard BtctlGATTTests.isBuilt() else { return }
        let cases: [(String, String)] = [
            ("{\n  \"services\": [],\n}", ":3:1: invalid JSON: trailing comma before '}'"),
            ("{\"services\": [{\"uuid\": \"180F\", \"uuid\": \"180A\"}]}", ":1:32: invalid JSON: key 'uuid' appears twice"),
            ("{\"name\": \"é\",\n \"servces\": []}", ":2:2: unknown key 'servces'"),
            ("{\"services\": [{\"uuid\": \"180F\",\n  \"characteristics\": [{\"uuid\": \"2A19\", \"properties\": [\"reed\"]}]}]}",
             ":2:55: services[0].characteristics[0].properties: unknown 'reed'"),
            ("{\"services\": [{\"uuid\": 1}]}", ":1:24: services[0].uuid: expected a string, found a number"),
            ("{\"name\": \"a\nb\"}", ":1:12: invalid JSON: unterminated string"),
            (String(repeating: "[", count: 300), ":1:257: invalid JSON: nested deeper than 256 levels"),
            ("", ":1:1: invalid JSON: unexpected end of file"),
        ]
        for (i, (json, message)) in cases.enumerated() {
            let path = BtctlCLITests.temporary("syntax-\(i).json")
            try Data(json.utf8).write(to: URL(fileURLWithPath: path))
            let r = try await BtctlCLITests.run(["gatt", "serve", path, "-t", "virtual", "--duration", "0.1"])
            #expect(r.status == 1 && r.out.contains(path + message), "\(r.out)")
        }
    }
}
