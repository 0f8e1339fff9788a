// `btctl gatt` as a user runs it: real btctl processes on Rootcanal, one serving
// docs/examples/battery.json, the other discovering, reading and writing by name;
// `btctl gatt discover` listing included and secondary services, from Bumble's GATT
// server and from `btctl gatt serve`.

import BLETesting
import Foundation
import Testing

@Suite(.serialized, .liveTimeLimit) struct BtctlGATTTests {
    /// btctl, run with a state directory of this test run's own (`Interop.stateHome`):
    /// a default bond file never lands in the user's home, nor carries over from an
    /// earlier run.
    static var btctl: String {
        _ = Interop.stateHome
        return Interop.root + "/.build/debug/btctl"
    }

    /// Whether btctl is built; when it is not, a run that requires interop records why.
    static func isBuilt(sourceLocation: SourceLocation = #_sourceLocation) -> Bool {
        guard FileManager.default.isExecutableFile(atPath: btctl) else {
            if Interop.required { Issue.record("btctl is not built at \(btctl)", sourceLocation: sourceLocation) }
            return false
        }
        return true
    }

    static func run(_ args: [String]) async throws -> (status: Int32, out: String) {
        try await Interop.execute(btctl, args, timeout: 30, mergeStderr: true)
    }

    @Test func serveDiscoverReadWriteByName() async throws {
        guard let binary = try Interop.rootcanal() else { return }
        guard Self.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let t = rc.transportSpec
        let server = Process()
        server.executableURL = URL(fileURLWithPath: Self.btctl)
        server.arguments = ["gatt", "serve", Interop.root + "/docs/examples/battery.json", "-t", t, "--json", "--duration", "30"]
        let serverOut = Pipe()
        server.standardOutput = serverOut
        try server.run()
        defer { if server.isRunning { server.terminate() } }

        let discover = try await Self.run(["gatt", "discover", "--name", "btctl-battery", "-t", t, "--json"])
        #expect(discover.status == 0, "\(discover.out)")
        let lines = discover.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(lines.contains { $0["event"] as? String == "service" && $0["uuid"] as? String == "180F" })
        #expect(lines.contains { $0["event"] as? String == "characteristic" && $0["uuid"] as? String == "2A19" && ($0["properties"] as? [String]) == ["read", "notify"] })
        #expect(lines.contains { $0["event"] as? String == "descriptor" && $0["uuid"] as? String == "2901" })

        let read = try await Self.run(["gatt", "read", "--name", "btctl-battery", "--uuid", "6E400003-B5A3-F393-E0A9-E50E24DCCA9E", "-t", t, "--json"])
        #expect(read.status == 0)
        #expect(read.out.contains("\"text\":\"hello from btctl\""), "\(read.out)")

        let long = String(repeating: "y", count: 100)
        let write = try await Self.run(["gatt", "write", "--name", "btctl-battery", "--uuid", "6E400002-B5A3-F393-E0A9-E50E24DCCA9E", "--text", long, "-t", t])
        #expect(write.status == 0, "\(write.out)")

        let missing = try await Self.run(["gatt", "read", "--name", "nobody", "--handle", "3", "-t", t, "--connect-timeout", "1"])
        #expect(missing.status != 0)
        #expect(missing.out.contains("no device named 'nobody'"))

        server.terminate()
        _ = await Interop.exit(of: server)
        let served = String(decoding: await Interop.readAll(serverOut), as: UTF8.self)
        #expect(served.contains("\"event\":\"written\""), "\(served)")
        #expect(served.contains(Array(long.utf8).map { String(format: "%02x", $0) }.joined()), "the 100-byte write did not arrive whole")
    }

    /// The discover events of one service, by UUID.
    /// Rootcanal, and Bumble's GATT server (bumble_gatt_peripheral.py with `arguments`)
    /// advertising on it; nil when either, or btctl, is not here.
    static func bumbleServer(_ arguments: [String]) async throws -> (RootcanalProcess, LiveProcess)? {
        guard let binary = try Interop.rootcanal(), let python = try BumbleGATTTests.python(), isBuilt() else { return nil }
        let rc = try await RootcanalProcess.launch(binary: binary)
        let bumble = try LiveProcess(python, [Interop.root + "/Tests/InteropTests/bumble_gatt_peripheral.py", String(rc.hciPort)] + arguments)
        #expect(await bumble.waitForOutput { $0.contains("\"event\": \"advertising\"") }, "\(bumble.output)")
        return (rc, bumble)
    }

    static func events(_ lines: [[String: Any]], _ event: String, uuid: String) -> [[String: Any]] {
        lines.filter { $0["event"] as? String == event && ($0["uuid"] as? String)?.uppercased() == uuid }
    }

    /// Bumble's server with a primary service FFE0 including a secondary FFE8 and the
    /// primary FFF0: one Read By Type over the database finds both includes, FFE8's
    /// characteristic is discovered, and the listing keeps handle order. With
    /// `--values` every readable value and descriptor is read, long ones whole; the
    /// one Bumble refuses shows its error and the listing goes on.
    @Test func discoverListsBumblesIncludes() async throws {
        guard let (rc, bumble) = try await Self.bumbleServer(["--forever", "--includes"]) else { return }
        defer { rc.stop() }
        let json = try await Self.run(["gatt", "discover", "F1:F2:F3:F4:F5:F6/random", "-t", rc.transportSpec, "--json", "--values"])
        let text = try await Self.run(["gatt", "discover", "F1:F2:F3:F4:F5:F6/random", "-t", rc.transportSpec])
        let textValues = try await Self.run(["gatt", "discover", "F1:F2:F3:F4:F5:F6/random", "-t", rc.transportSpec, "--values"])
        _ = await bumble.stop()
        #expect(json.status == 0 && text.status == 0, "\(json.out)\n\(text.out)")
        let lines = try JSONSchemaTests.check(json.out, against: "gatt-discover")

        let secondary = try #require(Self.events(lines, "service", uuid: "FFE8").first, "\(json.out)")
        let including = try #require(Self.events(lines, "service", uuid: "FFE0").first)
        let fff0 = try #require(Self.events(lines, "service", uuid: "FFF0").first)
        #expect(secondary["primary"] as? Bool == false && including["primary"] as? Bool == true && fff0["primary"] as? Bool == true)
        #expect(Self.events(lines, "characteristic", uuid: "FFE9").first?["service"] as? String == "FFE8", "\(json.out)")
        // The third include's declaration from Bumble carries two octets of the 128-bit
        // UUID (0xCA9E); the service's own declaration at that range names it.
        let wide = try #require(Self.events(lines, "service", uuid: "6E40BBBB-B5A3-F393-E0A9-E50E24DCCA9E").first)
        let includes = lines.filter { $0["event"] as? String == "include" }
        #expect(includes.count == 3, "\(json.out)")
        #expect(!lines.contains { $0["uuid"] as? String == "CA9E" }, "\(json.out)")
        for (inc, service) in zip(includes, [secondary, fff0, wide]) {
            #expect(inc["service"] as? String == "FFE0")
            #expect(inc["uuid"] as? String == service["uuid"] as? String)
            #expect(inc["start"] as? Int == service["start"] as? Int && inc["end"] as? Int == service["end"] as? Int)
            let h = inc["handle"] as? Int ?? 0, lo = including["start"] as? Int ?? .max, hi = including["end"] as? Int ?? 0
            #expect(h > lo && h <= hi, "the include declaration lies inside FFE0")
        }
        let starts = lines.filter { $0["event"] as? String == "service" }.compactMap { $0["start"] as? Int }
        #expect(starts == starts.sorted(), "services in handle order")
        #expect(text.out.contains("secondary service FFE8"), "\(text.out)")
        #expect(text.out.contains("  include FFE8  handles 0x"), "\(text.out)")
        #expect(!text.out.contains("\"bumble\""), "no values without --values")

        // --values
        func value(_ uuid: String) -> String? { Self.events(lines, "characteristic", uuid: uuid).first?["value"] as? String }
        #expect(value("FFF1") == Array("bumble".utf8).hexString, "\(json.out)")
        #expect(value("FFF4") == (0..<200).map { UInt8($0) }.hexString, "a 200-byte value read whole with Read Blob")
        #expect(value("FFE9") == Array("secondary".utf8).hexString)
        #expect(value("FFF3") == nil, "not readable: not read")
        let refused = Self.events(lines, "characteristic", uuid: "FFE2").first
        #expect(refused?["value"] == nil && (refused?["error"] as? String)?.contains("Insufficient Authorization") == true, "\(json.out)")
        let cccds = lines.filter { $0["event"] as? String == "descriptor" && $0["uuid"] as? String == "2902" }
        #expect(!cccds.isEmpty && cccds.allSatisfy { $0["value"] as? String == "0000" }, "\(cccds)")
        #expect(textValues.status == 0 && textValues.out.contains(": 62756d626c65  \"bumble\""), "\(textValues.out)")
        #expect(textValues.out.contains("Insufficient Authorization"), "\(textValues.out)")
    }

    /// `gatt serve` with a secondary service under a 128-bit UUID, included by a primary
    /// one: its include declaration carries no UUID (§3.2), so the client reads the
    /// secondary service's declaration for it; a 16-bit secondary included after it is
    /// listed after it.
    @Test func serveAndDiscoverIncludes() async throws {
        guard let binary = try Interop.rootcanal() else { return }
        guard Self.isBuilt() else { return }
        let rc = try await RootcanalProcess.launch(binary: binary)
        defer { rc.stop() }
        let file = BtctlCLITests.temporary("includes.json")
        let secondaryUUID = "6E40AAAA-B5A3-F393-E0A9-E50E24DCCA9E"
        try Data("""
            {"name": "btctl-includes", "services": [
              {"uuid": "\(secondaryUUID)", "primary": false,
               "characteristics": [{"uuid": "2A19", "properties": ["read"], "value": "2a"}]},
              {"uuid": "FFE8", "primary": false},
              {"uuid": "180F", "includes": ["\(secondaryUUID)", "FFE8"],
               "characteristics": [{"uuid": "2A1A", "properties": ["read"], "value": "01"}]}
            ]}
            """.utf8).write(to: URL(fileURLWithPath: file))
        let server = try LiveProcess(Self.btctl, ["gatt", "serve", file, "-t", rc.transportSpec, "--duration", "30"], mergeStderr: true)
        #expect(await server.waitForOutput { $0.contains("advertising") }, "\(server.output)")
        let json = try await Self.run(["gatt", "discover", "--name", "btctl-includes", "-t", rc.transportSpec, "--json"])
        _ = await server.stop(signal: SIGINT)
        #expect(json.status == 0, "\(json.out)")
        let lines = try JSONSchemaTests.check(json.out, against: "gatt-discover")
        let secondary = try #require(Self.events(lines, "service", uuid: secondaryUUID).first, "\(json.out)")
        #expect(secondary["primary"] as? Bool == false)
        #expect(Self.events(lines, "characteristic", uuid: "2A19").first?["service"] as? String == secondaryUUID)
        // In handle order, though the 128-bit one's UUID came only with a later Read.
        let incs = lines.filter { $0["event"] as? String == "include" }
        #expect(incs.compactMap { $0["uuid"] as? String } == [secondaryUUID, "FFE8"], "\(json.out)")
        let inc = try #require(incs.first)
        #expect(inc["service"] as? String == "180F" && inc["uuid"] as? String == secondaryUUID)
        #expect(inc["start"] as? Int == secondary["start"] as? Int && inc["end"] as? Int == secondary["end"] as? Int)
    }

    /// `gatt subscribe --all` against Bumble's server: every characteristic with a CCCD
    /// that notifies or indicates (Service Changed, FFF2, FFF3, FFF5), notifications where
    /// offered; the values of all of them in one listing (FFF2's one notification, FFF3's
    /// indication, FFF5's burst of 200) until --count, then each written off the peer's
    /// CCCD before the link goes.
    @Test func subscribeAllTakesEveryCharacteristicThatNotifies() async throws {
        guard let (rc, bumble) = try await Self.bumbleServer(["--forever"]) else { return }
        defer { rc.stop() }
        let run = try await Self.run(["gatt", "subscribe", "F1:F2:F3:F4:F5:F6/random", "--all", "--count", "202", "-t", rc.transportSpec, "--json"])
        // Bumble hears the CCCDs written off (its subscription events with both flags false).
        let off = await bumble.waitForOutput(within: .seconds(10)) { $0.contains("\"uuid\": \"FFF3\", \"notify\": false, \"indicate\": false") }
        _ = await bumble.stop()
        #expect(run.status == 0, "\(run.out)")
        let lines = try JSONSchemaTests.check(run.out, against: "gatt-subscribe")
        let subscribed = lines.filter { $0["event"] as? String == "subscribed" }
        #expect(subscribed.compactMap { $0["uuid"] as? String } == ["2A05", "FFF2", "FFF3", "FFF5"], "\(run.out)")
        #expect(subscribed.compactMap { $0["indications"] as? Bool } == [true, false, true, false])
        let values = lines.filter { $0["event"] as? String == "notification" || $0["event"] as? String == "indication" }
        func of(_ uuid: String) -> [[String: Any]] { values.filter { $0["uuid"] as? String == uuid } }
        #expect(values.count == 202)
        #expect(of("FFF2").map { $0["value"] as? String } == ["42"] && of("FFF2").first?["event"] as? String == "notification", "\(values.prefix(3))")
        #expect(of("FFF3").map { $0["value"] as? String } == ["4343"] && of("FFF3").first?["event"] as? String == "indication")
        #expect(of("FFF5").count == 200 && of("FFF5").allSatisfy { ($0["value"] as? String)?.count == 400 })
        #expect(lines.last?["event"] as? String == "summary" && lines.last?["values"] as? Int == 202)
        #expect(off, "\(bumble.output.split(separator: "\n").filter { !$0.contains("\"written\"") })")
        let bad = try await Self.run(["gatt", "subscribe", "F1:F2:F3:F4:F5:F6/random", "--all", "--uuid", "FFF2", "-t", rc.transportSpec])
        #expect(bad.status == 64 && bad.out.contains("--all takes neither --handle nor --uuid"), "\(bad.out)")
    }

    /// `gatt read --by-uuid` (Read Using Characteristic UUID, no discovery) and `gatt
    /// write --reliable` (Prepare Write Requests for two characteristics, then one
    /// Execute Write Request) against Bumble's server: the 200-byte FFF4 read back whole
    /// (Read By Type cuts it, Read Blob completes it), both values written together
    /// (Bumble reports each write when the queue executes), and a piece refused at its
    /// Prepare Write Request leaves the other value as it was.
    @Test func readByUUIDAndAReliableWriteAgainstBumble() async throws {
        guard let (rc, bumble) = try await Self.bumbleServer(["--forever"]) else { return }
        defer { rc.stop() }
        let peer = ["F1:F2:F3:F4:F5:F6/random", "-t", rc.transportSpec, "--json"]
        func byUUID(_ uuid: String) async throws -> [[String: Any]] {
            let r = try await Self.run(["gatt", "read", "--uuid", uuid, "--by-uuid"] + peer)
            #expect(r.status == 0, "\(r.out)")
            return try JSONSchemaTests.check(r.out, against: "gatt-read").filter { $0["event"] as? String == "value" }
        }
        let fff4 = try await byUUID("FFF4"), fff1 = try await byUUID("FFF1")
        #expect(fff4.count == 1 && fff4.first?["value"] as? String == (0..<200).map { UInt8($0) }.hexString, "\(fff4)")
        let h1 = try #require(fff1.first?["handle"] as? Int), h4 = try #require(fff4.first?["handle"] as? Int)
        let written = try await Self.run(["gatt", "write", "--reliable", "--handle", "\(h1)", "--value", "0102", "--handle", "\(h4)", "--value",
                                          String(repeating: "ab", count: 60)] + peer)
        #expect(written.status == 0, "\(written.out)")
        #expect(try JSONSchemaTests.check(written.out, against: "gatt-write").filter { $0["event"] as? String == "written" }.compactMap { $0["handle"] as? Int } == [h1, h4])
        #expect(try await byUUID("FFF1").first?["value"] as? String == "0102")
        #expect(try await byUUID("FFF4").first?["value"] as? String == String(repeating: "ab", count: 60))
        // Bumble refuses the second piece (no attribute 0x00FE: Invalid Handle); the
        // queue is cancelled and nothing is written.
        let refused = try await Self.run(["gatt", "write", "--reliable", "--handle", "\(h1)", "--value", "ff", "--handle", "0xfe", "--value", "ff"] + peer)
        #expect(refused.status == 1, "\(refused.out)")
        #expect(try await byUUID("FFF1").first?["value"] as? String == "0102")
        #expect(try await byUUID("2BFF").isEmpty, "no such value: no line, exit 0")
        let bad = try await Self.run(["gatt", "write", "--reliable", "--handle", "\(h1)", "--value", "01", "--handle", "\(h4)"] + peer)
        #expect(bad.status == 64, "\(bad.out)")
        _ = await bumble.stop()
        // Bumble saw the two values of the reliable write, and never the refused one's.
        #expect(bumble.output.contains("\"uuid\": \"FFF1\", \"value\": \"0102\"") && !bumble.output.contains("\"value\": \"ff\""), "\(bumble.output)")
    }
}
